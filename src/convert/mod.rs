//! Profile conversion: the plan (pure), the progress and outcome types, and
//! the verification; carrying it out is in [`run`].

pub mod exec;
pub mod manage;
pub mod operation;
pub mod report;
pub mod run;

pub use run::{Finished, Start, execute, run_balance};

use serde::{Deserialize, Serialize};
use std::path::PathBuf;

use crate::device::preflight::Reason;
use crate::error::{Error, ErrorKind, Result};
use crate::model::alloc::{self, ChunkKind};
use crate::model::profile::Profile;
use crate::model::relocate::{self, Layout, Shortfall};
use crate::model::space::BgType;
use crate::operation::state::FsState;
use crate::parse::size::format_iec;
use crate::sys::kernel::btrfs::{self, FsHandle};

/// What the user asked for. System chunks follow metadata.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConvertRequest {
    /// Target data profile.
    pub data: Option<Profile>,
    /// Target metadata (and system) profile.
    pub metadata: Option<Profile>,
    /// Allow lowering metadata redundancy, RAID5/6 metadata, and skip the
    /// signature checks of `device add`.
    pub force: bool,
}

/// One type's change.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct TypeChange {
    /// `data`, `metadata` or `system`.
    #[serde(rename = "type", with = "bg_type_name")]
    #[schemars(with = "BgType")]
    pub kind: BgType,
    /// Profiles now.
    pub from: Vec<Profile>,
    /// Profile after.
    pub to: Profile,
    /// Logical bytes in block groups not yet in the target profile.
    pub bytes_to_convert: u64,
    /// Logical bytes used.
    pub used_bytes: u64,
}

/// A block-group type as its JSON name (`data`, ...), both ways.
mod bg_type_name {
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    use crate::model::space::BgType;

    pub fn serialize<S: Serializer>(t: &BgType, s: S) -> Result<S::Ok, S::Error> {
        t.serialize(s)
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<BgType, D::Error> {
        let name = String::deserialize(d)?;
        BgType::from_json_name(&name)
            .ok_or_else(|| serde::de::Error::custom(format!("unknown block-group type {name}")))
    }
}

/// The conversion plan.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ConvertPlan {
    /// Mount point.
    pub mount_point: PathBuf,
    /// Number of devices.
    pub devices: usize,
    /// Raw size.
    pub raw_bytes: u64,
    /// Per type.
    pub changes: Vec<TypeChange>,
    /// Estimated usable data capacity now (current profiles, empty layout).
    pub data_capacity_before: u64,
    /// Estimated usable data capacity after.
    pub data_capacity_after: u64,
    /// Dangers the user must accept.
    pub risks: Vec<String>,
    /// Things to know.
    pub warnings: Vec<String>,
    /// Why it cannot go ahead (empty: it can).
    pub refusals: Vec<Reason>,
    /// All types are already in their target profile.
    pub nothing_to_do: bool,
    /// The btrfs-progs command equivalent to what btrfs-lab runs (the
    /// BALANCE_V2 ioctl with these filters).
    pub equivalent_command: Vec<String>,
    /// A balance with these targets exists already: what the run does with
    /// it (`null`: it starts a new one).
    pub existing: Option<Existing>,
}

/// What a conversion does with a balance that exists already.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum Existing {
    /// A paused balance with the same targets: resume it.
    Resume,
    /// A running balance with the same targets (another process, or one
    /// the kernel is cancelling after its process was killed): follow it,
    /// then start what is left, if anything.
    Follow,
    /// A balance someone cancelled: wait until it ended, then start.
    WaitForCancel,
}

impl ConvertPlan {
    /// `Err` with every blocking refusal (one line, the others in the
    /// hint), or `Ok` when it may go ahead.
    pub fn check(&self, force: bool) -> Result<()> {
        let blocking = self.blocking(force);
        let Some(first) = blocking.first() else {
            return Ok(());
        };
        let mut e = Error::new(
            ErrorKind::Refused,
            format!("cannot convert: {}", first.message),
        );
        if blocking.len() > 1 {
            let rest: Vec<&str> = blocking[1..].iter().map(|r| r.message.as_str()).collect();
            e = e.with_hint(format!("also: {}", rest.join("; also: ")));
        }
        Err(e)
    }

    /// Refusals that still block with or without `--force`.
    pub fn blocking(&self, force: bool) -> Vec<&Reason> {
        self.refusals.iter().filter(|r| r.blocks(force)).collect()
    }
}

fn names(p: &[Profile]) -> String {
    if p.is_empty() {
        "none".to_owned()
    } else {
        p.iter().map(|p| p.name()).collect::<Vec<_>>().join("+")
    }
}

/// Usable data capacity of an empty layout on `sizes` with these profiles:
/// `btrfs-lab capacity`'s model (mkfs's first chunks, then data chunks
/// with metadata growing by the filesystem's share).
fn data_capacity(fs: &FsState, sizes: &[u64], data: Profile, metadata: Profile) -> u64 {
    crate::space::capacity::usable_for(fs, sizes, Some(data), Some(metadata))
}

fn dominant(fs: &FsState, kind: BgType) -> Option<Profile> {
    fs.spaces
        .iter()
        .filter(|s| {
            s.total_bytes > 0
                && crate::operation::state::matches_kind(
                    crate::sys::kernel::btrfs::bg_type_of(s.flags),
                    kind,
                )
        })
        .max_by_key(|s| s.total_bytes)
        .map(|s| crate::sys::kernel::btrfs::profile_of(s.flags))
}

/// Warnings from the device error counters: a conversion reads every chunk
/// it moves and stops at the first block it can neither read nor repair.
fn error_warnings(fs: &FsState) -> Vec<String> {
    let m = fs.mount_point.display();
    let mut w = Vec::new();
    for d in &fs.device_errors {
        let name = if d.path.is_empty() {
            format!("device {} (missing)", d.devid)
        } else {
            format!("device {} ({})", d.devid, d.path)
        };
        if d.unreadable() > 0 {
            w.push(format!(
                "{name} has recorded {} corruption and {} read errors: a conversion reads every chunk and fails with an I/O error at the first block it can neither read nor repair; run a scrub first (btrfs scrub start -B {m}), restore or delete the files it names, and make sure a backup exists",
                d.corruption, d.read
            ));
        } else if d.write + d.flush + d.generation > 0 {
            w.push(format!(
                "{name} has recorded {} write, {} flush and {} generation errors: check the device and its cable (btrfs device stats {m}) before moving data onto it",
                d.write, d.flush, d.generation
            ));
        }
    }
    w
}

/// Plans a conversion on `fs` (pure: everything comes from `fs`).
pub fn plan_convert(fs: &FsState, req: &ConvertRequest) -> ConvertPlan {
    plan_convert_on(fs, req, None)
}

pub use crate::operation::layout::{balance_in_flux, read_layout};

/// The smallest device (of a few sizes) whose addition lets the replay
/// finish, if any.
fn device_that_fits(
    layout: &Layout,
    data: Option<Profile>,
    metadata: Option<Profile>,
) -> Option<u64> {
    let largest = layout.free.iter().copied().max().unwrap_or(0).max(1 << 30);
    (0..8)
        .map(|i| (256u64 << 20) << i)
        .filter(|&s| s <= 4 * largest)
        .find(|&size| {
            let mut l = layout.clone();
            l.free.push(size);
            l.total_bytes += size;
            relocate::simulate(&l, data, metadata).is_ok()
        })
}

/// The refusal when the replay runs out of space.
fn shortfall_reason(layout: &Layout, req: &ConvertRequest, s: &Shortfall) -> Reason {
    let what = s.why("");
    let fix = match device_that_fits(layout, req.data, req.metadata) {
        Some(size) => format!(
            "add a device of at least {} (btrfs-lab device add) or delete data first",
            format_iec(size)
        ),
        None => "add devices (btrfs-lab device add) or delete data first".to_owned(),
    };
    Reason::general(
        "no-space-during-conversion",
        format!(
            "not enough space to convert: relocating chunk {} of {} ({} {} at {}) to {}, {what}; the kernel's balance stops there with ENOSPC (no space left on device); {fix}",
            s.step,
            s.steps,
            s.kind.name(),
            s.from,
            s.logical,
            s.to,
        ),
        false,
    )
}

/// What a plan finds: why it may not go ahead, the dangers to accept, the
/// things to know.
#[derive(Default)]
struct Findings {
    refusals: Vec<Reason>,
    risks: Vec<String>,
    warnings: Vec<String>,
}

/// [`plan_convert`] with the chunks of the filesystem ([`read_layout`]):
/// the conversion is replayed chunk by chunk as the kernel relocates them
/// and refused where the replay runs out of space.
pub fn plan_convert_on(fs: &FsState, req: &ConvertRequest, layout: Option<&Layout>) -> ConvertPlan {
    let mut f = Findings::default();
    if req.data.is_none() && req.metadata.is_none() {
        f.refusals.push(Reason::general(
            "no-target",
            "give --data PROFILE, --metadata PROFILE or both".into(),
            false,
        ));
    }
    let existing = existing_balance(fs, req, &mut f);
    mixed_block_groups(fs, req, &mut f);
    let changes = type_changes(fs, req);
    devices_and_kernel(fs, req, &mut f);
    if let Some(m) = req.metadata {
        metadata_redundancy(fs, m, &mut f);
    }
    if let Some(d) = req.data {
        data_risks(fs, d, &mut f);
    }
    // Space: the converted layout must fit, and there must be room to start.
    let sizes: Vec<u64> = fs.devices.iter().map(|d| d.size).collect();
    let cur_data = dominant(fs, BgType::Data).unwrap_or(Profile::Single);
    let cur_meta = dominant(fs, BgType::Metadata).unwrap_or(Profile::Dup);
    let new_data = req.data.unwrap_or(cur_data);
    let new_meta = req.metadata.unwrap_or(cur_meta);
    let before = data_capacity(fs, &sizes, cur_data, cur_meta);
    let after = data_capacity(fs, &sizes, new_data, new_meta);
    let nothing_to_do = changes.iter().all(|c| c.bytes_to_convert == 0);
    if !nothing_to_do && f.refusals.iter().all(|r| r.code != "too-few-devices") {
        space_to_convert(fs, &changes, new_data, after, &mut f);
    }
    // The replay: only on a settled filesystem (no balance running or
    // being cancelled: [`balance_in_flux`]); a balance that is followed is
    // replayed once it has ended, before anything is started
    // ([`run::execute`]). A refusal only where the replay, from a state it
    // reads whole, runs out.
    if !nothing_to_do && f.refusals.is_empty() {
        replay(fs, req, layout, &mut f);
    }
    f.warnings.extend(error_warnings(fs));
    ConvertPlan {
        mount_point: fs.mount_point.clone(),
        devices: fs.devices.len(),
        raw_bytes: fs.raw_size(),
        changes,
        data_capacity_before: before,
        data_capacity_after: after,
        risks: f.risks,
        warnings: f.warnings,
        refusals: f.refusals,
        nothing_to_do: nothing_to_do && existing.is_none(),
        equivalent_command: equivalent_command(fs, req),
        existing,
    }
}

/// A balance that exists already: one with the same targets is resumed,
/// followed or waited for; one with others, or another exclusive
/// operation, refuses.
fn existing_balance(fs: &FsState, req: &ConvertRequest, f: &mut Findings) -> Option<Existing> {
    let m_disp = fs.mount_point.display();
    let wanted = Targets::from(*req);
    let mut existing = None;
    match fs.balance {
        Some(b) if b.cancelling => {
            existing = Some(Existing::WaitForCancel);
            f.warnings.push("a balance is being cancelled on this filesystem: the conversion starts when it has ended".to_owned());
        }
        Some(b) if b.paused && b.targets() == wanted => existing = Some(Existing::Resume),
        Some(b) if b.paused => f.refusals.push(Reason::general(
            "balance-paused",
            format!(
                "a paused balance with other targets ({}) exists: resume it with `btrfs-lab convert {m_disp} --resume`, or cancel it with `btrfs-lab convert {m_disp} --cancel` first",
                b.targets().describe()
            ),
            false,
        )),
        Some(b) if b.targets() == wanted => existing = Some(Existing::Follow),
        Some(b) => f.refusals.push(Reason::general(
            "balance-running",
            format!(
                "a balance with other targets ({}) is running: watch it with `btrfs-lab convert {m_disp} --status`, or pause or cancel it with `btrfs-lab convert {m_disp} --pause` / `--cancel`",
                b.targets().describe()
            ),
            false,
        )),
        None => match fs.exclusive_operation.as_deref() {
            None | Some("none") => {}
            Some("balance paused") => f.refusals.push(Reason::general(
                "balance-paused",
                format!("a paused balance exists: resume it with `btrfs-lab convert {m_disp} --resume`, or cancel it with `btrfs-lab convert {m_disp} --cancel` first"),
                false,
            )),
            Some("balance") => f.refusals.push(Reason::general(
                "balance-running",
                format!("a balance is running: watch it with `btrfs-lab convert {m_disp} --status`, or pause or cancel it with `--pause` / `--cancel`"),
                false,
            )),
            Some(op) => f.refusals.push(Reason::general(
                "exclusive-operation",
                format!("another operation is running on this filesystem ({op}); wait until it ends"),
                false,
            )),
        },
    }
    existing
}

/// A filesystem of mixed block groups takes one profile for both.
fn mixed_block_groups(fs: &FsState, req: &ConvertRequest, f: &mut Findings) {
    if fs.mixed_block_groups()
        && let (Some(d), Some(m)) = (req.data, req.metadata)
        && d != m
    {
        f.refusals.push(Reason::general(
            "mixed-block-groups",
            format!("this filesystem mixes data and metadata in the same chunks: give the same profile for both (not {d} and {m})"),
            false,
        ));
    }
}

/// Each type's change (system follows metadata).
fn type_changes(fs: &FsState, req: &ConvertRequest) -> Vec<TypeChange> {
    let mut changes = Vec::new();
    let mut add_change = |kind: BgType, to: Profile| {
        changes.push(TypeChange {
            kind,
            from: fs.profiles(kind),
            to,
            bytes_to_convert: fs.allocated_outside(kind, to),
            used_bytes: fs.used(kind),
        })
    };
    if let Some(d) = req.data {
        add_change(BgType::Data, d);
    }
    if let Some(m) = req.metadata {
        add_change(BgType::Metadata, m);
        add_change(BgType::System, m);
    }

    changes
}

/// Each target needs its devices, and its kernel.
fn devices_and_kernel(fs: &FsState, req: &ConvertRequest, f: &mut Findings) {
    let n = fs.devices.len();
    let kernel = fs.kernel;
    for (what, p) in [("data", req.data), ("metadata", req.metadata)] {
        let Some(p) = p else { continue };
        let need = p.min_devices_on(kernel) as usize;
        if n < need {
            f.refusals.push(Reason::general(
                "too-few-devices",
                format!(
                    "{what} profile {p} needs at least {need} devices, this filesystem has {n} (add devices first: btrfs-lab device add)"
                ),
                false,
            ));
        }
        if let Some(min) = p.min_kernel() {
            if kernel < min {
                f.refusals.push(Reason::general(
                    "kernel-too-old",
                    format!("{p} needs Linux {min} or later; this is {kernel}"),
                    false,
                ));
            } else if !fs.features.iter().any(|f| f == "raid1c34") {
                f.warnings.push(format!(
                    "{p} turns on the raid1c34 feature: the filesystem will no longer mount on kernels older than {min}; check that your rescue media are newer"
                ));
            }
        }
    }
}

/// A metadata target that protects less: refused without the force flag,
/// and a risk.
fn metadata_redundancy(fs: &FsState, m: Profile, f: &mut Findings) {
    let current = fs.profiles(BgType::Metadata);
    let now = current
        .iter()
        .map(|p| p.tolerated_failures())
        .min()
        .unwrap_or(0);
    // The kernel's rule (btrfs_balance): metadata or system that has a
    // redundant profile now (two copies or parity) converted to one
    // without needs the force flag. DUP → single is one.
    let kernel_reduces = current
        .iter()
        .chain(&fs.profiles(BgType::System))
        .any(|p| p.redundant())
        && !m.redundant();
    if m.tolerated_failures() < now {
        f.refusals.push(Reason::general(
            "lower-metadata-redundancy",
            format!(
                "metadata {} → {m} lowers redundancy (survives {now} → {} failed devices); the kernel needs --force for this, btrfs-lab --allow-weaker-metadata",
                names(&current),
                m.tolerated_failures()
            ),
            true,
        ));
    } else if kernel_reduces {
        f.refusals.push(Reason::general(
            "lower-metadata-redundancy",
            format!(
                "metadata {} → {m} lowers redundancy (two copies of every metadata block → one); the kernel needs --force for this, btrfs-lab --allow-weaker-metadata",
                names(&current)
            ),
            true,
        ));
    }
    if kernel_reduces {
        f.risks.push(format!(
            "metadata {m} keeps one copy of every metadata block: one bad block can make files, or the whole filesystem, unreadable"
        ));
    } else if m.tolerated_failures() < now {
        f.risks.push(format!(
            "metadata {m} survives {} failed device(s) instead of {now}: losing a device can make the whole filesystem unreadable",
            m.tolerated_failures()
        ));
    }
    if m.is_parity() {
        f.refusals.push(Reason::general(
            "raid56-metadata",
            format!("{m} for metadata is discouraged by the btrfs developers (write hole, slow scrub and repair); use raid1 or raid1c3, or --allow-weaker-metadata"),
            true,
        ));
    }
}

/// The risks of a data target: one copy, less redundancy, parity.
fn data_risks(fs: &FsState, d: Profile, f: &mut Findings) {
    let n = fs.devices.len();
    if !d.duplicates_data() && n > 1 {
        f.risks.push(format!(
            "data {d} keeps one copy of every block: if any one of the {n} devices fails, files lose data (large files are striped over all of them); btrfs and the kernel do not warn about this"
        ));
    }
    let current = fs.profiles(BgType::Data);
    let now = current
        .iter()
        .map(|p| p.tolerated_failures())
        .min()
        .unwrap_or(0);
    if d.tolerated_failures() < now {
        f.risks.push(format!(
            "data {} → {d} lowers redundancy: it survives {} failed device(s) instead of {now}",
            names(&current),
            d.tolerated_failures()
        ));
    }
    if d.is_parity() {
        f.risks.push(format!(
            "{d} is discouraged: a crash during a write can leave data and parity inconsistent (write hole), and scrub and rebuild are slow"
        ));
    }
}

/// The data must fit the new profile, and each converted type needs room
/// for its first chunk.
fn space_to_convert(
    fs: &FsState,
    changes: &[TypeChange],
    new_data: Profile,
    after: u64,
    f: &mut Findings,
) {
    let data_used = fs.used(BgType::Data);
    let (total, kernel) = (fs.raw_size(), fs.kernel);
    if after < data_used {
        f.refusals.push(Reason::general(
            "no-space",
            format!(
                "not enough space: {} of data needs more than the {} that {new_data} data gives on these devices",
                format_iec(data_used),
                format_iec(after)
            ),
            false,
        ));
    }
    let mut free: Vec<u64> = fs.devices.iter().map(|d| d.unallocated()).collect();
    for c in changes
        .iter()
        .filter(|c| c.bytes_to_convert > 0 && c.kind != BgType::System)
    {
        let kind = if c.kind == BgType::Data {
            ChunkKind::Data
        } else {
            ChunkKind::Metadata
        };
        if alloc::allocate_chunk(&mut free, c.to, kind, total, kernel).is_none() {
            f.refusals.push(Reason::general(
                "no-room-to-start",
                format!(
                    "no unallocated space for a first {} {} chunk; free some (btrfs balance start -dusage=10 {}) or add a device",
                    c.to,
                    c.kind.json_name(),
                    fs.mount_point.display()
                ),
                false,
            ));
        }
    }
}

/// The replay of the conversion on `layout` (see [`plan_convert_on`]).
fn replay(fs: &FsState, req: &ConvertRequest, layout: Option<&Layout>, f: &mut Findings) {
    if balance_in_flux(fs) {
        f.warnings.push(
            "a balance is running or being cancelled: the space check that replays the conversion chunk by chunk is made when it has ended (what it relocates is in flux until then), before anything is started".to_owned(),
        );
    } else if let Some(layout) = layout
        && let Err(s) = relocate::simulate(layout, req.data, req.metadata)
    {
        // The replay takes what it cannot know as the least favourable
        // (extents not read as the largest, free space as the ranges
        // DUP chunks need, the space of relocated chunks reused late);
        // refused only when it runs out whatever it takes.
        use relocate::{Assume, Free, Unread};
        // Each replay once; an assumption that changes nothing here
        // (no extents unread, no dup target) is left out.
        let unread = relocate::has_unread_extents(layout, req.data);
        let dup = [req.data, req.metadata]
            .into_iter()
            .flatten()
            .any(|p| p.geometry().dev_stripes > 1);
        // System chunks to relocate: the kernel may give them a new one
        // along the way ([`Assume::early_system`]).
        let system = req.metadata.is_some_and(|to| {
            layout
                .chunks
                .iter()
                .any(|c| c.kind == crate::model::alloc::ChunkKind::System && c.profile != to)
        });
        let replays: Vec<(Assume, bool)> = Assume::all()
            .filter(|a| {
                (unread || a.unread == Unread::Largest)
                    && (dup || a.free == Free::Holes)
                    && (system || !a.early_system)
            })
            .map(|a| {
                (
                    a,
                    relocate::simulate_in(layout, req.data, req.metadata, a).is_ok(),
                )
            })
            .collect();
        // Fits only where `f` holds.
        let only = |f: fn(&Assume) -> bool| !replays.iter().any(|(a, ok)| *ok && !f(a));
        if !replays.iter().any(|(_, ok)| *ok) {
            f.refusals.push(shortfall_reason(layout, req, &s));
        } else {
            let why = if only(|a| a.early_system) {
                "the last system chunk can only be moved if the kernel has made a system chunk of the new profile by then, which it does by itself when system space runs short while it converts, and the space check cannot tell whether it will: it runs out if not, not if it does"
            } else if only(|a| a.unread == Unread::Smallest) {
                "the space check did not read the sizes of every data extent (too many) and runs out if they are large, not if they are small"
            } else if only(|a| a.free == Free::Total) {
                "dup chunks need both their copies in one contiguous free range of a device, and the space check does not know whether the ranges the relocated chunks free are contiguous: it runs out if they are not, not if they are"
            } else {
                "whether the space of each converted chunk can be used for the next one depends on when the kernel commits its transaction (timing): the space check runs out if it cannot, not if it can"
            };
            f.warnings.push(format!(
                "the conversion may run out of space at chunk {} of {} ({} {}): {why}; if the kernel stops with ENOSPC, what was converted stays converted and the same convert resumes after freeing space",
                s.step,
                s.steps,
                s.kind.name(),
                s.from,
            ));
        }
    } else if let Some(layout) = layout
        && [req.data, req.metadata]
            .into_iter()
            .flatten()
            .chain(layout.chunks.iter().map(|c| c.profile))
            .any(Profile::is_parity)
    {
        // The replay fits, but its raid5/raid6 chunks are not the
        // kernel's: on 4 × 1 GiB single with 900 MiB, -dconvert=raid6
        // replayed as fitting and the kernel ran out of space (its
        // parity chunks were 299 MiB a device). A refusal above is
        // sure (every one the matrix tried was a real ENOSPC); a "fits"
        // is not.
        f.warnings.push(
            "the conversion may run out of space: the space check replays how the kernel allocates chunks, and for raid5 and raid6 it does not know that well enough to say it fits; if the kernel stops with ENOSPC, what was converted stays converted and the same convert resumes after freeing space".to_owned(),
        );
    }
}

/// The btrfs-progs command that does what btrfs-lab's ioctl does.
fn equivalent_command(fs: &FsState, req: &ConvertRequest) -> Vec<String> {
    let mut cmd = vec!["btrfs".to_owned(), "balance".to_owned(), "start".to_owned()];
    if let Some(d) = req.data {
        cmd.push(format!("-dconvert={d},soft"));
    }
    if let Some(m) = req.metadata {
        cmd.push(format!("-mconvert={m},soft"));
        cmd.push(format!("-sconvert={m},soft"));
    }
    if req.force {
        cmd.push("--force".to_owned());
    }
    cmd.push(fs.mount_point.display().to_string());

    cmd
}

pub use crate::balance::run::{Event, Outcome, Progress};

pub use crate::model::profile::Targets;

impl From<ConvertRequest> for Targets {
    fn from(r: ConvertRequest) -> Self {
        Self {
            data: r.data,
            metadata: r.metadata,
        }
    }
}

/// Logical bytes used in block groups not yet in the target profiles: what
/// the conversion still has to move.
pub(crate) fn remaining_bytes(h: &FsHandle, t: Targets) -> u64 {
    h.space_entries()
        .map_or(0, |spaces| remaining_in(&spaces, t))
}

/// [`remaining_bytes`] of SPACE_INFO entries (pure).
pub(crate) fn remaining_in(spaces: &[crate::sys::kernel::btrfs::SpaceEntry], t: Targets) -> u64 {
    let outside = |kind: BgType, target: Profile| -> u64 {
        spaces
            .iter()
            .filter(|s| {
                crate::operation::state::matches_kind(btrfs::bg_type_of(s.flags), kind)
                    && btrfs::profile_of(s.flags) != target
            })
            .map(|s| s.used_bytes)
            .sum()
    };
    let mut r = 0;
    if let Some(d) = t.data {
        r += outside(BgType::Data, d);
    }
    if let Some(m) = t.metadata {
        r += outside(BgType::Metadata, m) + outside(BgType::System, m);
    }
    r
}

/// After a completed conversion: each converted type has exactly its target.
pub fn verify(fs: &FsState, t: Targets) -> Result<()> {
    let mut wrong = Vec::new();
    let mut check = |kind: BgType, want: Option<Profile>| {
        if let Some(w) = want {
            let have = fs.profiles(kind);
            if have != [w] {
                wrong.push(format!(
                    "{} is {} (wanted {w})",
                    kind.json_name(),
                    names(&have)
                ));
            }
        }
    };
    check(BgType::Data, t.data);
    check(BgType::Metadata, t.metadata);
    check(BgType::System, t.metadata);
    if wrong.is_empty() {
        Ok(())
    } else {
        Err(Error::new(
            ErrorKind::State,
            format!("the conversion did not finish: {}", wrong.join("; ")),
        )
        .with_hint("run the same convert again: chunks already converted are skipped"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::kernel::KernelVersion;
    use crate::model::relocate::LayoutChunk;
    use crate::operation::state::MemberDevice;
    use crate::sys::kernel::btrfs::SpaceEntry;
    use btrfs_uapi::space::BlockGroupFlags as F;

    const GIB: u64 = 1 << 30;

    fn fs(devices: usize, size: u64) -> FsState {
        FsState {
            path: "/mnt".into(),
            mount_point: "/mnt".into(),
            fsid: "x".into(),
            devices: (0..devices)
                .map(|i| MemberDevice {
                    devid: i as u64 + 1,
                    path: format!("/dev/loop{i}"),
                    size,
                    allocated: if i == 0 { 3 * GIB } else { 0 },
                })
                .collect(),
            spaces: vec![
                SpaceEntry {
                    flags: F::DATA,
                    total_bytes: 2 * GIB + GIB / 2,
                    used_bytes: 2 * GIB,
                },
                SpaceEntry {
                    flags: F::METADATA | F::DUP,
                    total_bytes: GIB / 4,
                    used_bytes: GIB / 16,
                },
                SpaceEntry {
                    flags: F::SYSTEM | F::DUP,
                    total_bytes: 8 << 20,
                    used_bytes: 16 << 10,
                },
                SpaceEntry {
                    flags: F::GLOBAL_RSV,
                    total_bytes: 8 << 20,
                    used_bytes: 0,
                },
            ],
            exclusive_operation: Some("none".into()),
            balance: None,
            kernel: KernelVersion::new(6, 18),
            features: vec!["no_holes".into()],
            device_errors: Vec::new(),
        }
    }

    fn req(data: Option<Profile>, metadata: Option<Profile>) -> ConvertRequest {
        ConvertRequest {
            data,
            metadata,
            force: false,
        }
    }

    #[test]
    fn the_reference_case_raid0_raid1() {
        let p = plan_convert(
            &fs(3, 8 * GIB),
            &req(Some(Profile::Raid0), Some(Profile::Raid1)),
        );
        assert!(p.blocking(false).is_empty(), "{:?}", p.refusals);
        assert_eq!(p.changes.len(), 3);
        assert_eq!(p.changes[0].from, vec![Profile::Single]);
        assert_eq!(p.changes[0].bytes_to_convert, 2 * GIB + GIB / 2);
        assert_eq!(p.changes[2].kind, BgType::System);
        assert_eq!(
            p.risks.len(),
            1,
            "raid0 data must be spelled out: {:?}",
            p.risks
        );
        assert!(p.risks[0].contains("any one of the 3 devices"));
        assert!(p.data_capacity_after > 20 * GIB);
        assert_eq!(
            p.equivalent_command.join(" "),
            "btrfs balance start -dconvert=raid0,soft -mconvert=raid1,soft -sconvert=raid1,soft /mnt"
        );
    }

    #[test]
    fn the_replay_refuses_where_it_runs_out() {
        let f = fs(2, 8 * GIB);
        let layout = Layout {
            free: vec![0, 0],
            chunks: vec![LayoutChunk {
                kind: ChunkKind::Data,
                profile: Profile::Single,
                logical: GIB,
                length: GIB,
                used: GIB / 2,
                stripes: vec![(0, GIB)],
                extents: None,
            }],
            total_bytes: 4 * GIB,
            kernel: KernelVersion::new(6, 18),
            global_reserve: 8 << 20,
        };
        let r = req(Some(Profile::Raid1), None);
        let p = plan_convert_on(&f, &r, Some(&layout));
        let r = p
            .refusals
            .iter()
            .find(|r| r.code == "no-space-during-conversion")
            .unwrap_or_else(|| panic!("{:?}", p.refusals));
        assert!(r.message.contains("chunk 1 of 1"), "{}", r.message);
        assert!(r.message.contains("ENOSPC"), "{}", r.message);

        // Extents not read: refused only if even the smallest run out
        // (above: no space at all); 2 × 2 GiB with four single chunks of
        // 416 MiB holding 340 MiB each runs out with 128 MiB extents, not
        // with small ones: a warning. Read, and large, it is refused.
        const MIB: u64 = 1 << 20;
        let per_dev = 2 * GIB - 264 * MIB - 2 * 416 * MIB;
        let unread = Layout {
            free: vec![per_dev, per_dev],
            chunks: (0..4u64)
                .map(|i| LayoutChunk {
                    kind: ChunkKind::Data,
                    profile: Profile::Single,
                    logical: GIB + i * 416 * MIB,
                    length: 416 * MIB,
                    used: 340 * MIB,
                    stripes: vec![((i % 2) as usize, 416 * MIB)],
                    extents: None,
                })
                .collect(),
            total_bytes: 4 * GIB,
            kernel: KernelVersion::new(6, 18),
            global_reserve: 8 << 20,
        };
        let p = plan_convert_on(&f, &req(Some(Profile::Raid1), None), Some(&unread));
        assert!(p.refusals.is_empty(), "{:?}", p.refusals);
        assert!(
            p.warnings.iter().any(|w| w.contains("may run out")),
            "{:?}",
            p.warnings
        );
        let mut read = unread.clone();
        for c in &mut read.chunks {
            c.extents = Some(vec![128 * MIB, 128 * MIB, 84 * MIB]);
        }
        let p = plan_convert_on(&f, &req(Some(Profile::Raid1), None), Some(&read));
        assert!(
            p.refusals
                .iter()
                .any(|r| r.code == "no-space-during-conversion"),
            "{:?}",
            p.refusals
        );

        // A balance running or being cancelled (its relocation's copy is
        // in flux): no refusal from the replay, a warning; a paused one
        // (settled between chunks) is replayed.
        let mut f = fs(2, 8 * GIB);
        f.exclusive_operation = Some("balance".into());
        for cancelling in [false, true] {
            let mut b = balance(true, Some(Profile::Raid1));
            b.cancelling = cancelling;
            f.balance = Some(b);
            let p = plan_convert_on(&f, &req(Some(Profile::Raid1), None), Some(&layout));
            assert!(p.refusals.is_empty(), "{:?}", p.refusals);
            assert!(
                p.warnings.iter().any(|w| w.contains("when it has ended")),
                "{:?}",
                p.warnings
            );
        }
        f.exclusive_operation = Some("balance paused".into());
        f.balance = Some(balance(false, Some(Profile::Raid1)));
        let p = plan_convert_on(&f, &req(Some(Profile::Raid1), None), Some(&layout));
        assert_eq!(p.existing, Some(Existing::Resume));
        assert!(
            p.refusals
                .iter()
                .any(|r| r.code == "no-space-during-conversion"),
            "{:?}",
            p.refusals
        );
    }

    #[test]
    fn refusals() {
        let codes = |p: &ConvertPlan| {
            p.refusals
                .iter()
                .map(|r| r.code.to_string())
                .collect::<Vec<_>>()
        };
        let two = fs(2, 8 * GIB);
        assert_eq!(
            codes(&plan_convert(&two, &req(None, Some(Profile::Raid1c3)))),
            ["too-few-devices"]
        );
        let mut old = fs(3, 8 * GIB);
        old.kernel = KernelVersion::new(5, 4);
        assert!(
            codes(&plan_convert(&old, &req(None, Some(Profile::Raid1c3))))
                .iter()
                .any(|c| c == "kernel-too-old")
        );
        // raid1 → dup lowers metadata redundancy: --force lifts it.
        let mut r1 = fs(2, 8 * GIB);
        r1.spaces[1].flags = F::METADATA | F::RAID1;
        let p = plan_convert(&r1, &req(None, Some(Profile::Dup)));
        assert_eq!(codes(&p), ["lower-metadata-redundancy"]);
        assert!(p.blocking(true).is_empty());
        let mut busy = fs(3, 8 * GIB);
        busy.exclusive_operation = Some("balance paused".into());
        assert_eq!(
            codes(&plan_convert(&busy, &req(Some(Profile::Raid0), None))),
            ["balance-paused"]
        );
        // Too much data for RAID1C3 on three small devices.
        let small = fs(3, 2 * GIB);
        assert!(
            codes(&plan_convert(&small, &req(Some(Profile::Raid1c3), None)))
                .iter()
                .any(|c| c == "no-space")
        );
    }

    #[test]
    fn warnings_and_nothing_to_do() {
        let p = plan_convert(&fs(3, 8 * GIB), &req(None, Some(Profile::Raid1c3)));
        assert!(p.warnings[0].contains("raid1c34"));
        let p = plan_convert(&fs(3, 8 * GIB), &req(Some(Profile::Single), None));
        assert!(p.nothing_to_do);
        let p = plan_convert(
            &fs(3, 8 * GIB),
            &req(Some(Profile::Raid5), Some(Profile::Raid6)),
        );
        assert!(p.refusals.iter().any(|r| r.code == "raid56-metadata"));
        assert!(p.risks.iter().any(|r| r.contains("write hole")));
    }

    fn balance(running: bool, data: Option<Profile>) -> crate::model::balance::BalanceInfo {
        crate::model::balance::BalanceInfo {
            running,
            paused: !running,
            cancelling: false,
            data_target: data,
            metadata_target: None,
            expected: 5,
            completed: 2,
        }
    }

    #[test]
    fn a_rerun_with_the_same_targets_resumes_or_follows() {
        let codes = |p: &ConvertPlan| {
            p.refusals
                .iter()
                .map(|r| r.code.to_string())
                .collect::<Vec<_>>()
        };
        let mut f = fs(3, 8 * GIB);
        f.exclusive_operation = Some("balance paused".into());
        f.balance = Some(balance(false, Some(Profile::Raid1)));
        let p = plan_convert(&f, &req(Some(Profile::Raid1), None));
        assert_eq!(codes(&p), Vec::<&str>::new());
        assert_eq!(p.existing, Some(Existing::Resume));
        assert!(!p.nothing_to_do);
        // Other targets: refused, with the exact commands.
        let p = plan_convert(&f, &req(Some(Profile::Raid0), None));
        assert_eq!(codes(&p), ["balance-paused"]);
        assert!(
            p.refusals[0]
                .message
                .contains("`btrfs-lab convert /mnt --resume`"),
            "{}",
            p.refusals[0].message
        );
        assert!(
            p.refusals[0]
                .message
                .contains("`btrfs-lab convert /mnt --cancel`")
        );
        assert!(
            p.refusals[0]
                .message
                .contains("data → raid1, metadata → unchanged")
        );
        // Running with the same targets (e.g. being cancelled after SIGKILL): followed.
        f.exclusive_operation = Some("balance".into());
        f.balance = Some(balance(true, Some(Profile::Raid1)));
        let p = plan_convert(&f, &req(Some(Profile::Raid1), None));
        assert_eq!(p.existing, Some(Existing::Follow), "{:?}", p.refusals);
        assert!(p.refusals.is_empty());
        let p = plan_convert(&f, &req(Some(Profile::Raid1), Some(Profile::Raid1)));
        assert_eq!(codes(&p), ["balance-running"]);
        // Cancel requested: wait for it.
        f.balance = Some(crate::model::balance::BalanceInfo {
            cancelling: true,
            ..balance(true, Some(Profile::Raid0))
        });
        let p = plan_convert(&f, &req(Some(Profile::Raid1), None));
        assert_eq!(p.existing, Some(Existing::WaitForCancel));
        assert!(p.refusals.is_empty());
    }

    #[test]
    fn dup_metadata_to_single_needs_force_as_in_the_kernel() {
        let codes = |p: &ConvertPlan| {
            p.refusals
                .iter()
                .map(|r| r.code.to_string())
                .collect::<Vec<_>>()
        };
        // fs() has metadata and system DUP on one device.
        for to in [Profile::Single, Profile::Raid0] {
            let p = plan_convert(&fs(2, 8 * GIB), &req(None, Some(to)));
            assert_eq!(codes(&p), ["lower-metadata-redundancy"], "{to}");
            assert!(p.refusals[0].force_overrides);
            assert!(
                p.risks
                    .iter()
                    .any(|r| r.contains("one copy of every metadata block"))
            );
            let forced = ConvertRequest {
                force: true,
                ..req(None, Some(to))
            };
            assert!(
                plan_convert(&fs(2, 8 * GIB), &forced)
                    .blocking(true)
                    .is_empty()
            );
        }
        // DUP → raid1 keeps two copies: no refusal, no risk.
        let p = plan_convert(&fs(2, 8 * GIB), &req(None, Some(Profile::Raid1)));
        assert!(p.refusals.is_empty(), "{:?}", p.refusals);
        assert!(p.risks.is_empty(), "{:?}", p.risks);
    }

    #[test]
    fn device_error_counters_warn_before_a_conversion() {
        use crate::operation::state::DeviceErrors;
        let mut f = fs(3, 8 * GIB);
        f.device_errors = vec![
            DeviceErrors {
                devid: 1,
                path: "/dev/loop0".into(),
                dev_uuid: String::new(),
                read: 0,
                write: 0,
                flush: 0,
                corruption: 204_784,
                generation: 0,
            },
            DeviceErrors {
                devid: 2,
                path: "/dev/loop1".into(),
                dev_uuid: String::new(),
                read: 0,
                write: 0,
                flush: 0,
                corruption: 0,
                generation: 0,
            },
        ];
        let p = plan_convert(&f, &req(Some(Profile::Raid1), None));
        let w: Vec<&String> = p.warnings.iter().filter(|w| w.contains("device")).collect();
        assert_eq!(w.len(), 1, "{:?}", p.warnings);
        assert!(
            w[0].starts_with(
                "device 1 (/dev/loop0) has recorded 204784 corruption and 0 read errors"
            ),
            "{}",
            w[0]
        );
        assert!(w[0].contains("btrfs scrub start -B /mnt"), "{}", w[0]);
        f.device_errors[1].write = 3;
        let p = plan_convert(&f, &req(Some(Profile::Raid1), None));
        assert!(
            p.warnings
                .iter()
                .any(|w| w.starts_with("device 2 (/dev/loop1) has recorded 3 write"))
        );
        f.device_errors.clear();
        let p = plan_convert(&f, &req(Some(Profile::Raid1), None));
        assert!(p.warnings.is_empty(), "{:?}", p.warnings);
    }
}
