//! Profile conversion: the plan (pure), and carrying it out with progress,
//! pause on SIGINT/SIGTERM, and verification.

use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use nix::errno::Errno;
use serde::Serialize;

use super::alloc::{self, ChunkKind};
use super::checks::Reason;
use super::state::FsState;
use crate::error::{Error, ErrorKind, Result};
use crate::model::kernel::RAID1C34;
use crate::model::profile::Profile;
use crate::model::space::BgType;
use crate::parse::size::format_iec;
use crate::sys::{btrfs, signals};

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
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TypeChange {
    /// `data`, `metadata` or `system`.
    #[serde(rename = "type")]
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

/// The conversion plan.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
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
}

impl ConvertPlan {
    /// Refusals that still block with or without `--force`.
    pub fn blocking(&self, force: bool) -> Vec<&Reason> {
        self.refusals.iter().filter(|r| r.blocks(force)).collect()
    }
}

/// Failures each profile tolerates (devices that may be lost).
fn tolerance(p: Profile) -> u32 {
    match p {
        Profile::Single | Profile::Dup | Profile::Raid0 => 0,
        Profile::Raid1 | Profile::Raid10 | Profile::Raid5 => 1,
        Profile::Raid1c3 | Profile::Raid6 => 2,
        Profile::Raid1c4 => 3,
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
/// metadata and system reserved first, then data chunks until nothing fits.
fn data_capacity(fs: &FsState, sizes: &[u64], data: Profile, metadata: Profile) -> u64 {
    let total: u64 = sizes.iter().sum();
    let mut free = sizes.to_vec();
    let meta_need = fs.used(BgType::Metadata).max(1);
    alloc::reserve(&mut free, metadata, ChunkKind::System, 1, total, fs.kernel);
    alloc::reserve(
        &mut free,
        metadata,
        ChunkKind::Metadata,
        meta_need,
        total,
        fs.kernel,
    );
    alloc::capacity(&free, data, ChunkKind::Data, total, fs.kernel)
}

fn dominant(fs: &FsState, kind: BgType) -> Option<Profile> {
    fs.spaces
        .iter()
        .filter(|s| {
            s.total_bytes > 0
                && super::state::matches_kind(crate::sys::btrfs::bg_type_of(s.flags), kind)
        })
        .max_by_key(|s| s.total_bytes)
        .map(|s| crate::sys::btrfs::profile_of(s.flags))
}

/// Plans a conversion on `fs` (pure: everything comes from `fs`).
pub fn plan_convert(fs: &FsState, req: &ConvertRequest) -> ConvertPlan {
    let mut refusals = Vec::new();
    let mut risks = Vec::new();
    let mut warnings = Vec::new();
    let n = fs.devices.len();
    let kernel = fs.kernel;

    if req.data.is_none() && req.metadata.is_none() {
        refusals.push(Reason::general(
            "no-target",
            "give --data PROFILE, --metadata PROFILE or both".into(),
            false,
        ));
    }
    match fs.exclusive_operation.as_deref() {
        None | Some("none") => {}
        Some("balance paused") => refusals.push(Reason::general(
            "balance-paused",
            "a paused balance exists: resume it with --resume or cancel it with --cancel first"
                .into(),
            false,
        )),
        Some("balance") => refusals.push(Reason::general(
            "balance-running",
            "a balance is running: watch it with --status, or --pause / --cancel it".into(),
            false,
        )),
        Some(op) => refusals.push(Reason::general(
            "exclusive-operation",
            format!("another operation is running on this filesystem ({op}); wait until it ends"),
            false,
        )),
    }
    if fs.mixed_block_groups()
        && let (Some(d), Some(m)) = (req.data, req.metadata)
        && d != m
    {
        refusals.push(Reason::general(
            "mixed-block-groups",
            format!("this filesystem mixes data and metadata in the same chunks: give the same profile for both (not {d} and {m})"),
            false,
        ));
    }

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

    for (what, p) in [("data", req.data), ("metadata", req.metadata)] {
        let Some(p) = p else { continue };
        let need = alloc::min_devices(p, kernel) as usize;
        if n < need {
            refusals.push(Reason::general(
                "too-few-devices",
                format!(
                    "{what} profile {p} needs at least {need} devices, this filesystem has {n} (add devices first: btrfs-lab device add)"
                ),
                false,
            ));
        }
        if matches!(p, Profile::Raid1c3 | Profile::Raid1c4) {
            if kernel < RAID1C34 {
                refusals.push(Reason::general(
                    "kernel-too-old",
                    format!("{p} needs Linux {RAID1C34} or later; this is {kernel}"),
                    false,
                ));
            } else if !fs.features.iter().any(|f| f == "raid1c34") {
                warnings.push(format!(
                    "{p} turns on the raid1c34 feature: the filesystem will no longer mount on kernels older than {RAID1C34}; check that your rescue media are newer"
                ));
            }
        }
    }
    if let Some(m) = req.metadata {
        let current = fs.profiles(BgType::Metadata);
        let now = current.iter().map(|p| tolerance(*p)).min().unwrap_or(0);
        if tolerance(m) < now {
            refusals.push(Reason::general(
                "lower-metadata-redundancy",
                format!(
                    "metadata {} → {m} lowers redundancy (survives {now} → {} failed devices); the kernel needs --force for this, so does btrfs-lab",
                    names(&current),
                    tolerance(m)
                ),
                true,
            ));
        }
        if matches!(m, Profile::Raid5 | Profile::Raid6) {
            refusals.push(Reason::general(
                "raid56-metadata",
                format!("{m} for metadata is discouraged by the btrfs developers (write hole, slow scrub and repair); use raid1 or raid1c3, or --force"),
                true,
            ));
        }
    }
    if let Some(d) = req.data {
        if !d.duplicates_data() && n > 1 {
            risks.push(format!(
                "data {d} keeps one copy of every block: if any one of the {n} devices fails, files lose data (large files are striped over all of them); btrfs and the kernel do not warn about this"
            ));
        }
        let current = fs.profiles(BgType::Data);
        let now = current.iter().map(|p| tolerance(*p)).min().unwrap_or(0);
        if tolerance(d) < now {
            risks.push(format!(
                "data {} → {d} lowers redundancy: it survives {} failed device(s) instead of {now}",
                names(&current),
                tolerance(d)
            ));
        }
        if matches!(d, Profile::Raid5 | Profile::Raid6) {
            risks.push(format!(
                "{d} is discouraged: a crash during a write can leave data and parity inconsistent (write hole), and scrub and rebuild are slow"
            ));
        }
    }

    // Space: the converted layout must fit, and there must be room to start.
    let sizes: Vec<u64> = fs.devices.iter().map(|d| d.size).collect();
    let total = fs.raw_size();
    let cur_data = dominant(fs, BgType::Data).unwrap_or(Profile::Single);
    let cur_meta = dominant(fs, BgType::Metadata).unwrap_or(Profile::Dup);
    let new_data = req.data.unwrap_or(cur_data);
    let new_meta = req.metadata.unwrap_or(cur_meta);
    let before = data_capacity(fs, &sizes, cur_data, cur_meta);
    let after = data_capacity(fs, &sizes, new_data, new_meta);
    let data_used = fs.used(BgType::Data);
    let nothing_to_do = changes.iter().all(|c| c.bytes_to_convert == 0);
    if !nothing_to_do && refusals.iter().all(|r| r.code != "too-few-devices") {
        if after < data_used {
            refusals.push(Reason::general(
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
                refusals.push(Reason::general(
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

    ConvertPlan {
        mount_point: fs.mount_point.clone(),
        devices: n,
        raw_bytes: total,
        changes,
        data_capacity_before: before,
        data_capacity_after: after,
        risks,
        warnings,
        refusals,
        nothing_to_do,
        equivalent_command: cmd,
    }
}

/// What a running balance reported.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Progress {
    /// Chunks to relocate (0 when unknown, e.g. after a remount).
    pub chunks_expected: u64,
    /// Chunks relocated.
    pub chunks_done: u64,
    /// Logical bytes used outside the target profiles: still to move.
    pub bytes_remaining: u64,
    /// Logical bytes converted since this run started.
    pub bytes_done: u64,
    /// Bytes per second since this run started.
    pub rate_bytes_per_sec: f64,
    /// Estimated seconds left (`null` until there is a rate).
    pub eta_seconds: Option<f64>,
}

/// What happened to the balance.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Outcome {
    /// It finished.
    Completed,
    /// It is paused (by us on a signal, or by someone else).
    Paused,
    /// Someone cancelled it.
    Cancelled,
}

/// Events while a balance runs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Event {
    /// Counters and bytes.
    Progress(Progress),
    /// A signal arrived; pausing after the current chunk.
    Pausing,
}

/// Targets the remaining bytes are counted against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Targets {
    /// Data target.
    pub data: Option<Profile>,
    /// Metadata (and system) target.
    pub metadata: Option<Profile>,
}

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
pub fn remaining_bytes(path: &Path, t: Targets) -> u64 {
    let Ok(spaces) = btrfs::space_entries(path) else {
        return 0;
    };
    let fs = FsState {
        path: path.to_path_buf(),
        mount_point: path.to_path_buf(),
        fsid: String::new(),
        devices: Vec::new(),
        spaces,
        exclusive_operation: None,
        balance: None,
        kernel: crate::model::kernel::KernelVersion::new(0, 0),
        features: Vec::new(),
    };
    let mut r = 0;
    if let Some(d) = t.data {
        r += fs.used_outside(BgType::Data, d);
    }
    if let Some(m) = t.metadata {
        r += fs.used_outside(BgType::Metadata, m) + fs.used_outside(BgType::System, m);
    }
    r
}

/// How to start the balance.
#[derive(Debug, Clone, Copy)]
pub enum Start {
    /// A new conversion.
    Convert(ConvertRequest),
    /// Resume the paused one.
    Resume,
}

/// Runs the balance in a thread and reports progress until it ends. On
/// SIGINT/SIGTERM it pauses the balance (the kernel would cancel it if this
/// process died of the signal); a second signal exits at once and the
/// balance still pauses, because the pause was already requested.
pub fn run_balance(
    path: &Path,
    start: Start,
    targets: Targets,
    on_event: &mut dyn FnMut(Event),
) -> Result<Outcome> {
    let (tx, rx) = mpsc::channel();
    let worker_path = path.to_path_buf();
    let worker = thread::spawn(move || {
        let r = match start {
            Start::Convert(req) => {
                btrfs::run_convert_balance(&worker_path, req.data, req.metadata, req.force)
            }
            Start::Resume => btrfs::resume_balance(&worker_path),
        };
        let _ = tx.send(r);
    });
    let started = Instant::now();
    let initial = remaining_bytes(path, targets);
    let mut pause_requested = false;
    let mut last_report = Instant::now();
    let result = loop {
        match rx.recv_timeout(Duration::from_millis(100)) {
            Ok(r) => break r,
            Err(mpsc::RecvTimeoutError::Disconnected) => break Err(Errno::EIO),
            Err(mpsc::RecvTimeoutError::Timeout) => {}
        }
        if signals::interrupted() && !pause_requested {
            pause_requested = true;
            on_event(Event::Pausing);
            match btrfs::balance_control(path, true) {
                Ok(()) | Err(Errno::ENOTCONN) => {}
                Err(e) => return Err(Error::from_errno(e, "cannot pause the balance on", path)),
            }
        }
        if last_report.elapsed() >= Duration::from_millis(500) {
            last_report = Instant::now();
            on_event(Event::Progress(progress(path, targets, initial, started)));
        }
    };
    let _ = worker.join();
    match result {
        Ok(()) => {
            on_event(Event::Progress(progress(path, targets, initial, started)));
            Ok(Outcome::Completed)
        }
        Err(Errno::ECANCELED) => {
            let paused = btrfs::balance_status(path).ok().flatten().is_some();
            Ok(if pause_requested || paused { Outcome::Paused } else { Outcome::Cancelled })
        }
        Err(Errno::ENOSPC) => Err(Error::new(
            ErrorKind::NoSpace,
            format!("the conversion ran out of space on {}; what was converted stays converted", path.display()),
        )
        .with_hint("free space (delete files, or btrfs balance start -dusage=10) or add a device, then run the same convert again")),
        Err(e) => Err(Error::from_errno(e, "the balance failed on", path)),
    }
}

fn progress(path: &Path, t: Targets, initial: u64, started: Instant) -> Progress {
    let (expected, done) = btrfs::balance_status(path)
        .ok()
        .flatten()
        .map_or((0, 0), |s| (s.expected, s.completed));
    let remaining = remaining_bytes(path, t);
    let bytes_done = initial.saturating_sub(remaining);
    let secs = started.elapsed().as_secs_f64();
    let rate = if secs > 0.0 {
        bytes_done as f64 / secs
    } else {
        0.0
    };
    Progress {
        chunks_expected: expected,
        chunks_done: done,
        bytes_remaining: remaining,
        bytes_done,
        rate_bytes_per_sec: rate,
        eta_seconds: (rate > 0.0).then(|| remaining as f64 / rate),
    }
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
    use crate::admin::state::MemberDevice;
    use crate::model::kernel::KernelVersion;
    use crate::sys::btrfs::SpaceEntry;
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
    fn refusals() {
        let codes = |p: &ConvertPlan| p.refusals.iter().map(|r| r.code).collect::<Vec<_>>();
        let two = fs(2, 8 * GIB);
        assert_eq!(
            codes(&plan_convert(&two, &req(None, Some(Profile::Raid1c3)))),
            ["too-few-devices"]
        );
        let mut old = fs(3, 8 * GIB);
        old.kernel = KernelVersion::new(5, 4);
        assert!(
            codes(&plan_convert(&old, &req(None, Some(Profile::Raid1c3))))
                .contains(&"kernel-too-old")
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
            codes(&plan_convert(&small, &req(Some(Profile::Raid1c3), None))).contains(&"no-space")
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
}
