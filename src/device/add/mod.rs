//! `device add`: the plan (pure, from the filesystem's state and each
//! device's facts) and carrying it out through btrfs-progs.

pub mod operation;
pub mod record;

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::preflight::{Reason, device_reasons};
use crate::convert::{ConvertPlan, ConvertRequest, plan_convert};
use crate::error::{Error, ErrorKind, Result};
use crate::model::profile::Profile;
use crate::model::space::BgType;
use crate::operation::state::{FsState, MemberDevice, read_state_at};
use crate::parse::wipefs::Signature;
use crate::sys::block::blockdev::BlockDeviceFacts;
use crate::sys::fs::root::SysRoot;
use crate::sys::kernel::btrfs::FsHandle;
use crate::sys::tools::{self, display_argv};

/// A device to add.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct NewDevice {
    /// As given.
    pub path: PathBuf,
    /// Resolved.
    pub resolved: PathBuf,
    /// Size.
    pub size: u64,
    /// Signatures that will be wiped (only with --force).
    pub wipes: Vec<Signature>,
    /// Partitions whose table is overwritten (only with --force).
    pub partitions: Vec<String>,
}

/// A device line of a layout.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct LayoutDevice {
    /// Path.
    pub path: String,
    /// Size.
    pub size: u64,
    /// Added by this plan.
    pub new: bool,
}

/// The filesystem before or after.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Layout {
    /// Devices.
    pub devices: Vec<LayoutDevice>,
    /// Raw capacity.
    pub raw_bytes: u64,
    /// Usable data capacity in the filesystem's profiles, from the
    /// allocator model (`btrfs-lab capacity`).
    #[serde(default)]
    pub usable_bytes: u64,
}

/// Options of `device add`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct AddOptions {
    /// Wipe signatures and overwrite partition tables.
    pub force: bool,
    /// Do not TRIM the new devices.
    pub nodiscard: bool,
}

/// The plan.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct AddPlan {
    /// Mount point.
    pub mount_point: PathBuf,
    /// Devices to add.
    pub devices: Vec<NewDevice>,
    /// Before.
    pub before: Layout,
    /// After.
    pub after: Layout,
    /// Exactly the commands that will run, in order.
    pub commands: Vec<Vec<String>>,
    /// What the user should know (data stays put, next step, ...).
    pub notes: Vec<String>,
    /// Why it cannot go ahead (with --force taken into account).
    pub refusals: Vec<Reason>,
    /// The array's throughput ceiling before and after, when link
    /// information is available (see `btrfs-lab links`); null otherwise.
    pub throughput: Option<Throughput>,
    /// With `--then-convert`: the conversion planned on the filesystem as
    /// it will be after the add.
    pub then_convert: Option<ConvertPlan>,
}

/// A device asked for that is already a member.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct AlreadyMember {
    /// As given.
    pub path: PathBuf,
    /// Its btrfs device id.
    pub devid: u64,
}

/// What `device add` reports when every device asked for is already a
/// member: the result the user asked for is there, so it is a success that
/// changes nothing (a playbook run twice reports `changed: false`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct NothingToAdd {
    /// Always true.
    pub nothing_to_do: bool,
    /// The devices, with their device ids.
    pub already_members: Vec<AlreadyMember>,
}

/// `Some` when every device of the plan is already a member of `fs` and
/// that is the only reason the plan was refused (pure).
pub fn nothing_to_add(fs: &FsState, plan: &AddPlan) -> Option<NothingToAdd> {
    if plan.devices.is_empty() || plan.refusals.iter().any(|r| r.code != "member") {
        return None;
    }
    let mut already_members = Vec::new();
    for d in &plan.devices {
        let m = fs
            .devices
            .iter()
            .find(|m| super::preflight::same_device(&m.path, &d.resolved))?;
        already_members.push(AlreadyMember {
            path: d.path.clone(),
            devid: m.devid,
        });
    }
    Some(NothingToAdd {
        nothing_to_do: true,
        already_members,
    })
}

/// Plans adding `facts` to `fs` (pure).
pub(crate) fn plan_add(
    fs: &FsState,
    facts: &[BlockDeviceFacts],
    opts: AddOptions,
    is_root: bool,
    convert: Option<ConvertRequest>,
) -> AddPlan {
    let refusals = add_refusals(fs, facts, opts, is_root);
    let devices = new_devices(facts, opts);
    let (before, after) = layouts(fs, &devices);
    AddPlan {
        mount_point: fs.mount_point.clone(),
        commands: add_commands(fs, &devices, opts),
        notes: add_notes(fs, &devices, opts, convert),
        then_convert: convert.map(|req| convert_after_add(fs, &devices, &req)),
        devices,
        before,
        after,
        refusals,
        throughput: None,
    }
}

/// Why the add may not go ahead (with `--overwrite` taken into account).
fn add_refusals(
    fs: &FsState,
    facts: &[BlockDeviceFacts],
    opts: AddOptions,
    is_root: bool,
) -> Vec<Reason> {
    let mut refusals: Vec<Reason> = Vec::new();
    if !is_root {
        refusals.push(Reason::not_root("adding a device"));
    }
    if facts.is_empty() {
        refusals.push(Reason::general(
            "no-device",
            "give at least one device to add".into(),
            false,
        ));
    }
    match fs.exclusive_operation.as_deref() {
        None | Some("none") | Some("balance paused") => {}
        Some(op) => refusals.push(Reason::general(
            "exclusive-operation",
            format!("another operation is running on this filesystem ({op}); wait until it ends"),
            false,
        )),
    }
    let mut seen: Vec<&Path> = Vec::new();
    for f in facts {
        if seen.contains(&f.path.as_path()) {
            refusals.push(Reason::general(
                "duplicate",
                format!("{} is given twice", f.given.display()),
                false,
            ));
            continue;
        }
        seen.push(&f.path);
        refusals.extend(
            device_reasons(f, fs)
                .into_iter()
                .filter(|r| r.blocks(opts.force)),
        );
    }

    refusals
}

/// The devices to add, with what `--overwrite` destroys on them.
fn new_devices(facts: &[BlockDeviceFacts], opts: AddOptions) -> Vec<NewDevice> {
    facts
        .iter()
        .map(|f| NewDevice {
            path: f.given.clone(),
            resolved: f.path.clone(),
            size: f.size.unwrap_or(0),
            wipes: if opts.force {
                f.signatures.clone()
            } else {
                Vec::new()
            },
            partitions: if opts.force {
                f.partitions.clone()
            } else {
                Vec::new()
            },
        })
        .collect()
}

/// Exactly the commands that will run, in order.
fn add_commands(fs: &FsState, devices: &[NewDevice], opts: AddOptions) -> Vec<Vec<String>> {
    let mut commands = Vec::new();
    for d in devices
        .iter()
        .filter(|d| !d.wipes.is_empty() || !d.partitions.is_empty())
    {
        commands.push(vec![
            "wipefs".to_owned(),
            "--all".to_owned(),
            d.resolved.display().to_string(),
        ]);
    }
    let mut add = vec!["btrfs".to_owned(), "device".to_owned(), "add".to_owned()];
    if opts.force {
        add.push("--force".to_owned());
    }
    if opts.nodiscard {
        add.push("--nodiscard".to_owned());
    }
    add.extend(devices.iter().map(|d| d.resolved.display().to_string()));
    add.push(fs.mount_point.display().to_string());
    commands.push(add);

    commands
}

/// The filesystem's devices before and after.
fn layouts(fs: &FsState, devices: &[NewDevice]) -> (Layout, Layout) {
    let before_devices: Vec<LayoutDevice> = fs
        .devices
        .iter()
        .map(|d| LayoutDevice {
            path: d.path.clone(),
            size: d.size,
            new: false,
        })
        .collect();
    let mut after_devices = before_devices.clone();
    after_devices.extend(devices.iter().map(|d| LayoutDevice {
        path: d.resolved.display().to_string(),
        size: d.size,
        new: true,
    }));
    let usable = crate::space::capacity::usable_change(
        fs,
        &crate::space::capacity::Changes {
            add: devices.iter().map(|d| d.size).collect(),
            ..Default::default()
        },
    );
    let layout = |devices: Vec<LayoutDevice>, usable_bytes: u64| Layout {
        raw_bytes: devices.iter().map(|d| d.size).sum(),
        usable_bytes,
        devices,
    };

    (
        layout(before_devices, usable.before),
        layout(after_devices, usable.after),
    )
}

/// What the user should know: data stays put, the next step.
fn add_notes(
    fs: &FsState,
    devices: &[NewDevice],
    opts: AddOptions,
    convert: Option<ConvertRequest>,
) -> Vec<String> {
    let mut notes = Vec::new();
    if !opts.nodiscard {
        notes.push(
            "btrfs device add TRIMs the whole new device first (--nodiscard skips it)".to_owned(),
        );
    }
    notes.push(
        "existing data and metadata stay where they are: new writes use the new devices, and only a balance spreads what is there"
            .to_owned(),
    );
    let smallest = fs.devices.iter().map(|d| d.size).min().unwrap_or(0);
    for d in devices.iter().filter(|d| d.size > 0 && d.size < smallest) {
        notes.push(format!(
            "{} is smaller than the current members: striped and mirrored profiles use at most its size on each device",
            d.path.display()
        ));
    }
    let total_after = fs.devices.len() + devices.len();
    if let Some(req) = convert {
        let t = crate::convert::Targets::from(req);
        notes.push(format!(
            "then the conversion below ({}) spreads what is there over all devices",
            t.describe()
        ));
    } else {
        notes.extend(next_step(fs, total_after));
    }
    if fs.profiles(BgType::Metadata).contains(&Profile::Dup) && total_after >= 2 {
        notes.push("metadata is DUP (two copies on one device): after the add, RAID1 keeps the copies on different devices".to_owned());
    }

    notes
}

/// The step after the add for the profiles in place, never one that
/// lowers redundancy: striped and mirrored data get `btrfs-lab balance`
/// (the chunks narrower than the array, the chunks of the fuller devices),
/// data on one device at a time a conversion (metadata kept at its profile
/// when that is more redundant than RAID1); none while a conversion is
/// unfinished (two data profiles) or with one device.
/// (Each a note of its own: a command ends each.)
fn next_step(fs: &FsState, total_after: usize) -> Vec<String> {
    next_steps(fs, total_after).unwrap_or_default()
}

fn next_steps(fs: &FsState, total_after: usize) -> Option<Vec<String>> {
    let m = fs.mount_point.display();
    let [data] = fs.profiles(BgType::Data)[..] else {
        return None;
    };
    let devices = u32::try_from(total_after).ok().filter(|&n| n >= 2)?;
    if crate::balance::plan::striped(data) {
        data.stripes_on(devices, fs.kernel)?;
        return Some(vec![format!(
            "next, to spread the {data} data that is there over all devices (the chunks narrower than the array): btrfs-lab balance {m}"
        )]);
    }
    if data.tolerated_failures() > 0 {
        return Some(vec![format!(
            "next, to spread the {data} data that is there over all devices: btrfs-lab balance {m}"
        )]);
    }
    let metadata = fs
        .profiles(BgType::Metadata)
        .into_iter()
        .filter(|p| p.tolerated_failures() > Profile::Raid1.tolerated_failures())
        .max_by_key(|p| p.tolerated_failures())
        .filter(|p| p.stripes_on(devices, fs.kernel).is_some())
        .unwrap_or(Profile::Raid1);
    let mirror = format!("btrfs-lab convert {m} --data raid1 --metadata {metadata}");
    Some(if data == Profile::Dup {
        // RAID0 would drop DUP's second copy.
        vec![format!(
            "next, to keep data's two copies on different devices: {mirror}"
        )]
    } else {
        vec![
            format!(
                "next, to stripe data over all devices (fast, no redundancy): btrfs-lab convert {m} --data raid0 --metadata {metadata}"
            ),
            format!("or, to mirror it: {mirror}"),
        ]
    })
}

/// `--then-convert`: the conversion planned on the filesystem as it will
/// be after the add.
fn convert_after_add(fs: &FsState, devices: &[NewDevice], req: &ConvertRequest) -> ConvertPlan {
    let mut future = fs.clone();
    let next_id = fs.devices.iter().map(|d| d.devid).max().unwrap_or(0);
    for (i, d) in devices.iter().enumerate() {
        future.devices.push(MemberDevice {
            devid: next_id + 1 + i as u64,
            path: d.resolved.display().to_string(),
            size: d.size,
            allocated: 0,
        });
    }
    plan_convert(&future, req)
}

/// The array's read ceiling before and after, from the PCIe links of the
/// members (`btrfs-lab links`); `None` when no member has link information.
/// `data`: the data profile after (with `--then-convert`).
pub fn throughput(
    root: &SysRoot,
    state: &FsState,
    plan: &AddPlan,
    data: Option<Profile>,
) -> Option<Throughput> {
    use crate::hw::array_ceiling_for_block_devices;
    let profile_now = state
        .profiles(BgType::Data)
        .first()
        .copied()
        .unwrap_or(Profile::Single);
    let profile_after = data.unwrap_or(profile_now);
    let before: Vec<PathBuf> = state
        .devices
        .iter()
        .filter(|d| !d.path.is_empty())
        .map(|d| PathBuf::from(&d.path))
        .collect();
    let mut after = before.clone();
    after.extend(plan.devices.iter().map(|d| d.resolved.clone()));
    let b = array_ceiling_for_block_devices(root, &before, profile_now).ok()?;
    let a = array_ceiling_for_block_devices(root, &after, profile_after).ok()?;
    if b.one_reader.is_none() && a.one_reader.is_none() {
        return None;
    }
    Some(Throughput {
        before: b,
        after: a,
    })
}

/// Opens the filesystem at `path` once, reads it and the devices, and plans
/// the add (with the throughput estimate when the plan can go ahead).
pub fn prepare(
    root: &SysRoot,
    path: &Path,
    devices: &[PathBuf],
    opts: AddOptions,
    convert: Option<ConvertRequest>,
) -> Result<(FsHandle, FsState, AddPlan)> {
    let (fs, state) = crate::operation::state::open_state(root, path)?;
    let facts: Vec<_> = devices
        .iter()
        .map(|d| crate::sys::block::blockdev::inspect(root, d))
        .collect();
    let mut plan = plan_add(&state, &facts, opts, crate::sys::is_root(), convert);
    if plan.refusals.is_empty() {
        plan.throughput = throughput(root, &state, &plan, convert.and_then(|c| c.data));
    }
    Ok((fs, state, plan))
}

/// After the add: the conversion planned again on the filesystem as it is
/// now (read through the handle). `Ok(None)`: nothing left to convert.
/// A refusal says that the devices were added.
pub(crate) fn replan_convert(
    root: &SysRoot,
    fs: &FsHandle,
    mount_point: &Path,
    req: &ConvertRequest,
) -> Result<Option<ConvertPlan>> {
    let state = read_state_at(root, fs, mount_point)?;
    let layout = crate::convert::read_layout(fs, &state);
    let plan = crate::convert::plan_convert_on(&state, req, layout.as_ref());
    if let Some(first) = plan.blocking(req.force).first() {
        let rest: Vec<String> = plan
            .blocking(req.force)
            .iter()
            .skip(1)
            .map(|r| r.message.clone())
            .collect();
        let mut e = Error::new(
            ErrorKind::Refused,
            format!(
                "the devices were added, but cannot convert: {}",
                first.message
            ),
        );
        e = e.with_hint(if rest.is_empty() {
            "see btrfs-lab convert --help".to_owned()
        } else {
            format!("also: {}", rest.join("; also: "))
        });
        return Err(e);
    }
    Ok((!plan.nothing_to_do).then_some(plan))
}

/// What the add did, verified from the kernel.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct AddResult {
    /// Devices now, as the kernel lists them.
    pub devices: Vec<MemberDevice>,
    /// Raw capacity now.
    pub raw_bytes: u64,
}

/// Runs the plan's commands, then checks that every new device is a member
/// with the expected size.
///
/// `btrfs device add` is given the filesystem as `/proc/PID/fd/N`, the
/// directory this process holds open, never the mount path again: a path
/// swapped after the plan was shown cannot redirect it.
pub(crate) fn execute_add(
    root: &SysRoot,
    fs: &FsHandle,
    mount_point: &Path,
    plan: &AddPlan,
) -> Result<AddResult> {
    for shown in &plan.commands {
        let mut argv = shown.clone();
        if argv[0] == "btrfs"
            && let Some(last) = argv.last_mut()
        {
            *last = fs.proc_path().display().to_string();
        }
        let argv = &argv;
        let package = if argv[0] == "wipefs" {
            "util-linux"
        } else {
            "btrfs-progs"
        };
        let tool = tools::find(&argv[0], package)?;
        tool.run(&argv[1..]).map_err(|e| {
            Error::new(e.kind(), format!("{} (while running: {})", e.message(), display_argv(shown)))
                .with_hint("the filesystem is unchanged unless the add itself reported success; see btrfs-lab show")
        })?;
    }
    let state = read_state_at(root, fs, mount_point)?;
    for d in &plan.devices {
        let found = state
            .devices
            .iter()
            .find(|m| crate::device::preflight::same_device(&m.path, &d.resolved));
        match found {
            Some(m) if m.size == d.size => {}
            Some(m) => {
                return Err(Error::new(
                    ErrorKind::State,
                    format!(
                        "{} was added with {} bytes, expected {}",
                        d.path.display(),
                        m.size,
                        d.size
                    ),
                ));
            }
            None => {
                return Err(Error::new(
                    ErrorKind::State,
                    format!(
                        "{} is not a device of the filesystem after the add",
                        d.path.display()
                    ),
                ));
            }
        }
    }
    if state.devices.len() != plan.after.devices.len() {
        return Err(Error::new(
            ErrorKind::State,
            format!(
                "the filesystem has {} devices, expected {}",
                state.devices.len(),
                plan.after.devices.len()
            ),
        ));
    }
    Ok(AddResult {
        raw_bytes: state.raw_size(),
        devices: state.devices,
    })
}

/// `device add --json` without `--then-convert`: one document.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct AddReport {
    /// The plan.
    pub plan: AddPlan,
    /// What was done (absent with `--dry-run`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<AddResult>,
}

/// The read ceiling of the array for one data profile (`links`' array
/// ceiling: the same type, shared through [`crate::hw`]).
pub use crate::hw::model::ArrayCeiling as Ceiling;

/// The array's read ceiling before and after a `device add`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Throughput {
    /// Now.
    pub before: Ceiling,
    /// After the add (and the conversion, with `--then-convert`).
    pub after: Ceiling,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::kernel::KernelVersion;
    use crate::sys::kernel::btrfs::SpaceEntry;
    use btrfs_uapi::space::BlockGroupFlags as F;

    const GIB: u64 = 1 << 30;

    fn fs() -> FsState {
        FsState {
            path: "/mnt".into(),
            mount_point: "/mnt".into(),
            fsid: "x".into(),
            devices: vec![MemberDevice {
                devid: 1,
                path: "/dev/test-none-0".into(),
                size: 4 * GIB,
                allocated: GIB,
            }],
            spaces: vec![
                SpaceEntry {
                    flags: F::DATA,
                    total_bytes: GIB / 2,
                    used_bytes: GIB / 4,
                },
                SpaceEntry {
                    flags: F::METADATA | F::DUP,
                    total_bytes: GIB / 4,
                    used_bytes: 1 << 20,
                },
            ],
            exclusive_operation: Some("none".into()),
            balance: None,
            kernel: KernelVersion::new(6, 18),
            features: Vec::new(),
            device_errors: Vec::new(),
        }
    }

    /// `fs()` with data and metadata in these profiles.
    fn with_profiles(data: F, metadata: F) -> FsState {
        let mut f = fs();
        f.spaces[0].flags = F::DATA | data;
        f.spaces[1].flags = F::METADATA | metadata;
        f
    }

    #[test]
    fn the_next_step_never_lowers_redundancy() {
        // The seed's array: raid0 data, raid1c3 metadata, a fourth device.
        let n = next_step(&with_profiles(F::RAID0, F::RAID1C3), 4).join("; ");
        assert_eq!(
            n,
            "next, to spread the raid0 data that is there over all devices (the chunks narrower than the array): btrfs-lab balance /mnt"
        );
        assert!(!n.contains("convert"), "{n}");
        // Single data: a conversion, metadata kept at raid1c3.
        let n = next_step(&with_profiles(F::empty(), F::RAID1C3), 3).join("; ");
        assert!(n.contains("--data raid0 --metadata raid1c3"), "{n}");
        assert!(n.contains("--data raid1 --metadata raid1c3"), "{n}");
        assert!(!n.contains("--metadata raid1;"), "{n}");
        // DUP metadata goes to raid1 (no lower); DUP data only mirrors.
        let n = next_step(&with_profiles(F::empty(), F::DUP), 2).join("; ");
        assert!(n.contains("--data raid0 --metadata raid1;"), "{n}");
        let n = next_step(&with_profiles(F::DUP, F::DUP), 2).join("; ");
        assert!(!n.contains("raid0"), "{n}");
        assert!(n.contains("--data raid1 --metadata raid1"), "{n}");
        // Mirrored data: a balance, no conversion.
        let n = next_step(&with_profiles(F::RAID1, F::RAID1), 3).join("; ");
        assert!(n.starts_with("next, to spread the raid1 data"), "{n}");
        assert!(n.ends_with("btrfs-lab balance /mnt"), "{n}");
        assert!(!n.contains("convert"), "{n}");
        // One device: nothing to spread over.
        assert!(next_step(&with_profiles(F::empty(), F::DUP), 1).is_empty());
    }

    fn dev(path: &str, size: u64) -> BlockDeviceFacts {
        BlockDeviceFacts {
            exists: true,
            is_block: true,
            size: Some(size),
            ..BlockDeviceFacts::unknown(Path::new(path), Path::new(path))
        }
    }

    #[test]
    fn plan_for_two_new_devices() {
        let p = plan_add(
            &fs(),
            &[dev("/dev/nvme1n1", 4 * GIB), dev("/dev/nvme2n1", 4 * GIB)],
            AddOptions::default(),
            true,
            None,
        );
        assert!(p.refusals.is_empty(), "{:?}", p.refusals);
        assert_eq!(
            p.commands,
            vec![vec![
                "btrfs",
                "device",
                "add",
                "/dev/nvme1n1",
                "/dev/nvme2n1",
                "/mnt"
            ]]
        );
        assert_eq!(p.before.raw_bytes, 4 * GIB);
        assert_eq!(p.after.raw_bytes, 12 * GIB);
        assert!(
            p.notes
                .iter()
                .any(|n| n.contains("btrfs-lab convert /mnt --data raid0 --metadata raid1"))
        );
        assert!(p.notes.iter().any(|n| n.contains("stay where they are")));
    }

    #[test]
    fn force_names_what_is_destroyed() {
        let mut d = dev("/dev/sdb", 4 * GIB);
        d.signatures = vec![Signature {
            kind: "ext4".into(),
            offset: "0x438".into(),
            uuid: None,
            label: None,
        }];
        let p = plan_add(
            &fs(),
            std::slice::from_ref(&d),
            AddOptions::default(),
            true,
            None,
        );
        assert_eq!(p.refusals[0].code, "signature");
        let p = plan_add(
            &fs(),
            &[d],
            AddOptions {
                force: true,
                nodiscard: true,
            },
            true,
            None,
        );
        assert!(p.refusals.is_empty());
        assert_eq!(p.devices[0].wipes[0].kind, "ext4");
        assert_eq!(p.commands[0], vec!["wipefs", "--all", "/dev/sdb"]);
        assert_eq!(
            p.commands[1],
            vec![
                "btrfs",
                "device",
                "add",
                "--force",
                "--nodiscard",
                "/dev/sdb",
                "/mnt"
            ]
        );
    }

    #[test]
    fn refusals_are_all_reported() {
        let p = plan_add(
            &fs(),
            &[
                dev("/dev/a", 4 * GIB),
                dev("/dev/a", 4 * GIB),
                dev("/dev/b", 1 << 20),
            ],
            AddOptions::default(),
            false,
            None,
        );
        let codes: Vec<&str> = p.refusals.iter().map(|r| &*r.code).collect();
        assert_eq!(codes, ["not-root", "duplicate", "too-small"]);
    }

    #[test]
    fn then_convert_is_planned_on_the_future_layout() {
        let req = ConvertRequest {
            data: Some(Profile::Raid0),
            metadata: Some(Profile::Raid1),
            force: false,
        };
        let p = plan_add(
            &fs(),
            &[dev("/dev/b", 4 * GIB), dev("/dev/c", 4 * GIB)],
            AddOptions::default(),
            true,
            Some(req),
        );
        // The next step is the conversion asked for, not a suggestion of another.
        assert!(
            !p.notes.iter().any(|n| n.contains("--metadata raid1;")),
            "{:?}",
            p.notes
        );
        assert!(
            p.notes
                .iter()
                .any(|n| n.contains("data → raid0, metadata → raid1")),
            "{:?}",
            p.notes
        );
        let c = p.then_convert.unwrap();
        assert_eq!(c.devices, 3);
        assert!(c.blocking(false).is_empty(), "{:?}", c.refusals);
    }
}
