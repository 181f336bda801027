//! `bench --small-files --compare-profiles raid1,raid1c3`: the small-file
//! storm of [`super::metadata`] run once per metadata profile, each on a
//! throwaway btrfs of its own (loop devices with direct I/O, made and
//! removed through the sandbox job's public API), never on the user's
//! filesystem. Every sandbox has the same number of devices (enough for the
//! most demanding profile) and the same size, and the same data profile
//! (`single`), so the metadata profile is the only difference.
//!
//! This makes `bench` a composing job, like `demo` and `doctor`: it uses
//! `sandbox`'s public API (plan, `Sandbox` guard, records, teardown)
//! instead of a second copy of the loop-device and mkfs code (see
//! docs/architecture.md). The sandboxes are made one at a time, each torn
//! down before the next is made: by its guard on every exit path (errors,
//! panics, SIGINT/SIGTERM/SIGHUP); after a SIGKILL their records stay in the
//! state directory and the next `--compare-profiles` run removes them
//! (`btrfs-lab sandbox down --yes NAME` does it by hand).

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::{Error, ErrorKind, Result};
use crate::model::profile::Profile;
use crate::parse::size::format_iec;
use crate::sandbox::{
    self, FsKind, Sandbox, SandboxPlan, SandboxRecord, SandboxRequest, StateStore, plan_up,
};
use crate::sys::fs::root::SysRoot;
use crate::sys::{fs::filesystem, kernel::btrfs};

use super::kit::{self, check_stop};
use super::metadata::{self, MetadataOptions, MetadataReport, Phase};

/// Report version.
pub(crate) const REPORT_VERSION: u32 = 1;
/// Sandbox names start with this (`bench-3f9a1c-raid1c3`): how a later run
/// recognises what an earlier, killed run left.
pub(crate) const SANDBOX_PREFIX: &str = "bench-";
/// The data profile of every sandbox.
pub(crate) const DATA_PROFILE: Profile = Profile::Single;
/// The most profiles one run compares.
pub(crate) const MAX_PROFILES: usize = 9;
/// Smallest device of a sandbox.
const MIN_DEVICE_SIZE: u64 = 1 << 30;

/// What to compare.
#[derive(Debug, Clone)]
pub struct ProfilesOptions {
    /// The metadata profiles, the first one the baseline.
    pub profiles: Vec<Profile>,
    /// Files.
    pub files: u64,
    /// Threads.
    pub threads: u32,
    /// Where the sandboxes' directories go: DIR when given (each sandbox is
    /// DIR/NAME), else the sandbox root (`--sandbox-root`).
    pub images_dir: Option<PathBuf>,
    /// The sandbox root.
    pub sandbox_root: PathBuf,
    /// Where /proc and /sys are read.
    pub sysroot: SysRoot,
}

/// Parses `raid1,raid1c3`: at least one, at most [`MAX_PROFILES`], no
/// repeats.
pub fn parse_profiles(list: &str) -> Result<Vec<Profile>> {
    let mut out: Vec<Profile> = Vec::new();
    for part in list.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let p: Profile = part.parse()?;
        if out.contains(&p) {
            return Err(Error::usage(format!("--compare-profiles names {p} twice")));
        }
        out.push(p);
    }
    if out.is_empty() {
        return Err(Error::usage("--compare-profiles needs a list of profiles")
            .with_hint("e.g. --compare-profiles raid1,raid1c3"));
    }
    if out.len() > MAX_PROFILES {
        return Err(Error::usage(format!(
            "--compare-profiles takes at most {MAX_PROFILES} profiles"
        )));
    }
    Ok(out)
}

/// One sandbox of the plan.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct PlannedRun {
    /// Its metadata profile.
    pub metadata: Profile,
    /// The sandbox.
    pub sandbox: SandboxPlan,
}

/// The whole plan, shown before anything is made.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ProfilesPlan {
    /// Devices per sandbox.
    pub devices: u32,
    /// Size of each device (sparse).
    pub device_size_bytes: u64,
    /// Data profile of every sandbox.
    pub data: Profile,
    /// Files.
    pub files: u64,
    /// Threads.
    pub threads: u32,
    /// One per profile, in order.
    pub runs: Vec<PlannedRun>,
    /// Sandboxes an earlier run left (its process is gone): removed first.
    pub stale: Vec<String>,
}

/// Devices every sandbox gets: the most any of the profiles needs.
pub(crate) fn devices_for(profiles: &[Profile]) -> u32 {
    profiles.iter().map(|p| p.min_devices()).max().unwrap_or(1)
}

/// Size of each device: room for ~2 KiB of metadata per file on every
/// device (DUP puts two copies on one), plus 512 MiB for the system and
/// data chunks; at least 1 GiB (below that mkfs picks mixed block groups
/// on some versions). Sparse: only what btrfs writes takes space.
pub(crate) fn device_size_for(files: u64) -> u64 {
    let want = files.saturating_mul(2048).saturating_add(512 << 20);
    want.max(MIN_DEVICE_SIZE).div_ceil(1 << 20) * (1 << 20)
}

/// Computes the plan (pure). `nonce` keeps the sandbox names of concurrent
/// runs apart; `stale` are earlier runs' leftovers to remove first.
pub fn plan(opts: &ProfilesOptions, nonce: &str, stale: Vec<String>) -> Result<ProfilesPlan> {
    let mopts = MetadataOptions {
        files: opts.files,
        threads: opts.threads,
        ..MetadataOptions::new("/")
    };
    mopts.validate()?;
    if opts.profiles.is_empty() {
        return Err(Error::usage("--compare-profiles needs a list of profiles"));
    }
    let devices = devices_for(&opts.profiles);
    let size = device_size_for(opts.files);
    let mut runs = Vec::new();
    for &p in &opts.profiles {
        let name = format!("{SANDBOX_PREFIX}{nonce}-{}", p.name());
        let request = SandboxRequest {
            name: Some(name.clone()),
            devices,
            size_bytes: size,
            fs: FsKind::Btrfs,
            data: Some(DATA_PROFILE),
            metadata: Some(p),
            mkfs_args: Vec::new(),
            dir: opts.images_dir.as_ref().map(|d| d.join(&name)),
        };
        runs.push(PlannedRun {
            metadata: p,
            sandbox: plan_up(&request, &opts.sandbox_root, &name)?,
        });
    }
    Ok(ProfilesPlan {
        devices,
        device_size_bytes: size,
        data: DATA_PROFILE,
        files: opts.files,
        threads: opts.threads,
        runs,
        stale,
    })
}

impl ProfilesPlan {
    /// The steps, as `--dry-run` prints them: the exact mkfs argv of each
    /// sandbox (loop devices as `<loopN>`, known once attached).
    pub fn describe(&self) -> Vec<String> {
        let mut steps = Vec::new();
        for s in &self.stale {
            steps.push(format!(
                "remove sandbox {s}, left by an earlier bench run whose process is gone (as: btrfs-lab sandbox down --yes {s})"
            ));
        }
        let dirs = self.files.div_ceil(metadata::FILES_PER_DIR);
        for (i, r) in self.runs.iter().enumerate() {
            steps.push(format!(
                "[{}/{}] metadata {}: sandbox {}",
                i + 1,
                self.runs.len(),
                r.metadata,
                r.sandbox.name
            ));
            steps.extend(r.sandbox.describe().into_iter().map(|s| format!("  {s}")));
            steps.push(format!(
                "  in a new directory under {}: create {} empty files in {dirs} directories by {} threads, syncfs; evict their own dentries and inodes (a memory cgroup of their own, reclaimed), stat them all; delete them, syncfs",
                r.sandbox.mount_point.display(),
                self.files,
                self.threads
            ));
            steps.push(format!(
                "  unmount {}, detach the loop devices, remove {}",
                r.sandbox.mount_point.display(),
                r.sandbox.dir.display()
            ));
        }
        steps
    }

    /// Bytes the images may take on the disk that holds them, at most:
    /// every device filled to the metadata estimate.
    pub(crate) fn needed_space(&self) -> u64 {
        u64::from(self.devices)
            .saturating_mul(self.files.saturating_mul(2048))
            .saturating_add(256 << 20)
    }
}

/// A phase's figures divided by the baseline's (`None` when the baseline's
/// figure is zero or missing).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct PhaseRatio {
    /// `create`, `stat` or `delete`.
    pub phase: String,
    /// files/s ÷ the baseline's.
    pub files_per_sec: Option<f64>,
    /// files/s including the sync ÷ the baseline's.
    pub files_per_sec_with_sync: Option<f64>,
    /// Sync seconds ÷ the baseline's.
    pub sync_seconds: Option<f64>,
    /// Bytes the members wrote ÷ the baseline's.
    pub device_write_bytes: Option<f64>,
}

/// One profile's run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ProfileRun {
    /// The metadata profile asked for.
    pub metadata: Profile,
    /// The sandbox it ran on.
    pub sandbox: String,
    /// Its loop devices.
    pub devices: Vec<PathBuf>,
    /// The metadata test on it (its `metadata_profiles` are read back from
    /// the kernel).
    pub report: MetadataReport,
    /// Against the first profile, phase by phase.
    pub ratios: Vec<PhaseRatio>,
    /// The sandbox was removed.
    pub sandbox_removed: bool,
}

/// The report of `bench --small-files --compare-profiles`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ProfilesReport {
    /// Format version.
    pub(crate) report_version: u32,
    /// Always `compare-profiles`.
    pub mode: String,
    /// 0.
    pub exit_code: u8,
    /// One sentence.
    pub summary: String,
    /// Kernel release.
    pub kernel: String,
    /// Devices per sandbox.
    pub devices: u32,
    /// Size of each device.
    pub device_size_bytes: u64,
    /// Data profile of every sandbox.
    pub data_profile: Profile,
    /// Where the sandboxes' images were.
    #[serde(serialize_with = "crate::report::text::lossy_path")]
    pub images_dir: PathBuf,
    /// Files.
    pub files: u64,
    /// Threads.
    pub threads: u32,
    /// The profile the ratios are against.
    pub baseline: Profile,
    /// One per profile, in the order given.
    pub runs: Vec<ProfileRun>,
    /// Earlier runs' sandboxes removed first.
    pub stale_removed: Vec<String>,
    /// Notes.
    pub notes: Vec<String>,
}

fn ratio(a: Option<f64>, base: Option<f64>) -> Option<f64> {
    match (a, base) {
        (Some(a), Some(b)) if b > 0.0 && a.is_finite() => Some(a / b),
        _ => None,
    }
}

/// Phase-by-phase ratios of `phases` against `base` (pure).
pub fn ratios(phases: &[Phase], base: &[Phase]) -> Vec<PhaseRatio> {
    phases
        .iter()
        .map(|p| {
            let b = base.iter().find(|b| b.name == p.name);
            PhaseRatio {
                phase: p.name.clone(),
                files_per_sec: ratio(Some(p.files_per_sec), b.map(|b| b.files_per_sec)),
                files_per_sec_with_sync: ratio(
                    Some(p.files_per_sec_with_sync),
                    b.map(|b| b.files_per_sec_with_sync),
                ),
                sync_seconds: ratio(p.sync_seconds, b.and_then(|b| b.sync_seconds)),
                device_write_bytes: ratio(
                    Some(p.device_write_bytes as f64),
                    b.map(|b| b.device_write_bytes as f64),
                ),
            }
        })
        .collect()
}

/// Sandboxes an earlier `--compare-profiles` run left behind: named
/// `bench-…`, made by a process that no longer exists (it was killed).
pub fn stale_sandboxes(store: &StateStore) -> Result<Vec<SandboxRecord>> {
    Ok(store
        .load_all()?
        .into_iter()
        .filter(|r| r.name.starts_with(SANDBOX_PREFIX))
        .filter(|r| r.pid != std::process::id() && !Path::new(&format!("/proc/{}", r.pid)).exists())
        .collect())
}

/// Where the images go (for the report and the space check).
fn images_parent(plan: &ProfilesPlan) -> PathBuf {
    plan.runs
        .first()
        .and_then(|r| r.sandbox.dir.parent())
        .map_or_else(|| PathBuf::from("/"), Path::to_path_buf)
}

/// A DIR given for the sandboxes' images must be an existing directory
/// (reached following only root's symbolic links): `--yes` never creates
/// a mistyped DIR.
pub fn check_images_dir(opts: &ProfilesOptions) -> Result<()> {
    if let Some(d) = &opts.images_dir {
        crate::sys::fs::beneath::HeldDir::open(d).map_err(|e| {
            if e.kind() == ErrorKind::NotFound {
                Error::new(
                    ErrorKind::NotFound,
                    format!(
                        "{} does not exist: --compare-profiles puts the sandboxes' images in an existing directory",
                        crate::report::text::escape_path(d)
                    ),
                )
                .with_hint("create it first, or leave DIR out to use the sandbox root")
            } else {
                e
            }
        })?;
    }
    Ok(())
}

/// The refusals before the question: not root; the disk that will hold
/// the images memory-backed or without enough free space. Nothing is made.
pub fn preflight(plan: &ProfilesPlan, sysroot: &SysRoot) -> Result<()> {
    if !crate::sys::is_root() {
        return Err(Error::new(
            ErrorKind::Permission,
            "--compare-profiles needs root (loop devices and mount)",
        )
        .with_hint("run it as root, e.g. with sudo"));
    }
    let mut probe = images_parent(plan);
    while !probe.exists() {
        if !probe.pop() {
            return Ok(());
        }
    }
    let info = filesystem::inspect_dir(sysroot, &probe)?;
    kit::refuse_memory_backed(&info.mount.fs_type, &info.dir)?;
    let need = plan.needed_space();
    if info.available_bytes < need {
        return Err(Error::new(
            ErrorKind::NoSpace,
            format!(
                "not enough free space in {} for the sandboxes' images: about {} needed, {} free",
                info.dir.display(),
                format_iec(need),
                format_iec(info.available_bytes)
            ),
        )
        .with_hint("give a DIR on a disk with more room, or use fewer --files"));
    }
    Ok(())
}

/// Runs the plan: removes the stale sandboxes, then for each profile makes
/// its sandbox, runs the metadata test in it and removes it. `started` is
/// called just before the first change; `progress` with the profile and
/// the step (`sandbox`, `create`, `stat`, `delete`, `remove`).
pub fn run(
    plan: &ProfilesPlan,
    store: &StateStore,
    sysroot: &SysRoot,
    started: &mut dyn FnMut(),
    progress: &mut dyn FnMut(Profile, &str),
) -> Result<ProfilesReport> {
    preflight(plan, sysroot)?;
    kit::install_signals()?;
    check_stop()?;
    started();
    let mut stale_removed = Vec::new();
    for r in stale_sandboxes(store)? {
        if plan.stale.contains(&r.name) {
            sandbox::teardown(store, &r)?;
            stale_removed.push(r.name);
        }
    }
    let mut runs: Vec<ProfileRun> = Vec::new();
    for planned in &plan.runs {
        check_stop()?;
        progress(planned.metadata, "sandbox");
        // Torn down when dropped: errors, panics and signals included. A
        // Ctrl-C on a terminal also reaches mkfs, which then fails: that is
        // the interruption, not a failure.
        let sbx = Sandbox::up(&planned.sandbox, store).map_err(|e| match check_stop() {
            Err(stop) => stop,
            Ok(()) => e,
        })?;
        check_stop()?;
        let seen = btrfs::block_group_profiles(sbx.mount_point())?.metadata;
        if seen != vec![planned.metadata] {
            return Err(Error::new(
                ErrorKind::State,
                format!(
                    "the sandbox for {} has metadata {} after mkfs",
                    planned.metadata,
                    crate::model::profile::profile_list(&seen)
                ),
            ));
        }
        let mopts = MetadataOptions {
            files: plan.files,
            threads: plan.threads,
            cold: metadata::ColdMethod::OwnCgroup,
            sysroot: sysroot.clone(),
            ..MetadataOptions::new(sbx.mount_point())
        };
        let p = planned.metadata;
        let report = metadata::run(&mopts, &mut || {}, &mut |phase| progress(p, phase))?;
        let devices = sbx.devices();
        progress(p, "remove");
        let down = sbx.down()?;
        if !down.left.is_empty() {
            return Err(Error::new(
                ErrorKind::State,
                format!(
                    "sandbox {} was not fully removed: {}",
                    planned.sandbox.name,
                    down.left.join("; ")
                ),
            )
            .with_hint(format!(
                "inspect it, then: btrfs-lab sandbox down --yes {}",
                planned.sandbox.name
            )));
        }
        let ratios = ratios(
            &report.phases,
            runs.first().map_or(&report.phases, |b| &b.report.phases),
        );
        runs.push(ProfileRun {
            metadata: planned.metadata,
            sandbox: planned.sandbox.name.clone(),
            devices,
            report,
            ratios,
            sandbox_removed: true,
        });
    }
    Ok(build_report(plan, runs, stale_removed))
}

/// Runs [`run`] with the profile, its step and the file count on the `ui`'s
/// progress bar; the `ui` is told when the first change begins.
pub fn measure(
    plan: &ProfilesPlan,
    store: &StateStore,
    sysroot: &SysRoot,
    ui: &dyn crate::ui::Ui,
) -> Result<ProfilesReport> {
    let bar = ui.progress("bench --compare-profiles {msg}");
    let files = plan.files;
    let result = run(
        plan,
        store,
        sysroot,
        &mut || ui.started(),
        &mut |p, step| bar.set_message(format!("{p}: {step} ({files} files)")),
    );
    bar.finish();
    result
}

fn build_report(
    plan: &ProfilesPlan,
    runs: Vec<ProfileRun>,
    stale_removed: Vec<String>,
) -> ProfilesReport {
    let baseline = runs.first().map_or(DATA_PROFILE, |r| r.metadata);
    let mut parts = Vec::new();
    for r in runs.iter().skip(1) {
        let c = r.ratios.iter().find(|x| x.phase == "create");
        let f = |v: Option<f64>| v.map_or("-".to_owned(), |x| format!("×{x:.2}"));
        parts.push(format!(
            "{} vs {baseline}: creates {} files/s, {} sync time, {} bytes written",
            r.metadata,
            f(c.and_then(|c| c.files_per_sec)),
            f(c.and_then(|c| c.sync_seconds)),
            f(c.and_then(|c| c.device_write_bytes)),
        ));
    }
    let summary = format!(
        "{} files by {} threads on {} sandbox{} of {} × {} loop devices (data {}){}",
        plan.files,
        plan.threads,
        runs.len(),
        if runs.len() == 1 { "" } else { "es" },
        plan.devices,
        format_iec(plan.device_size_bytes),
        plan.data,
        if parts.is_empty() {
            String::new()
        } else {
            format!(": {}", parts.join("; "))
        }
    );
    let mut notes = vec![
        "each profile ran on a fresh btrfs of its own; the sandboxes were removed".to_owned(),
        "loop devices are as fast as the disk under their images: compare the profiles with each other, not with your array".to_owned(),
    ];
    if !stale_removed.is_empty() {
        notes.push(format!(
            "removed first, left by an earlier run that was killed: {}",
            stale_removed.join(", ")
        ));
    }
    ProfilesReport {
        report_version: REPORT_VERSION,
        mode: "compare-profiles".into(),
        exit_code: 0,
        summary,
        kernel: crate::sys::kernel_release(),
        devices: plan.devices,
        device_size_bytes: plan.device_size_bytes,
        data_profile: plan.data,
        images_dir: images_parent(plan),
        files: plan.files,
        threads: plan.threads,
        baseline,
        runs,
        stale_removed,
        notes,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts(profiles: &[Profile]) -> ProfilesOptions {
        ProfilesOptions {
            profiles: profiles.to_vec(),
            files: 200_000,
            threads: 4,
            images_dir: None,
            sandbox_root: PathBuf::from("/var/tmp/btrfs-lab"),
            sysroot: SysRoot::host(),
        }
    }

    #[test]
    fn profile_lists() {
        assert_eq!(
            parse_profiles("raid1, raid1c3").unwrap(),
            vec![Profile::Raid1, Profile::Raid1c3]
        );
        for bad in [
            "",
            ",",
            "raid1,raid1",
            "raid7",
            "single,dup,raid0,raid1,raid1c3,raid1c4,raid10,raid5,raid6,single",
        ] {
            assert_eq!(parse_profiles(bad).unwrap_err().exit_code(), 2, "{bad}");
        }
    }

    #[test]
    fn every_sandbox_has_the_devices_of_the_most_demanding_profile() {
        assert_eq!(devices_for(&[Profile::Raid1, Profile::Raid1c3]), 3);
        assert_eq!(devices_for(&[Profile::Dup, Profile::Raid10]), 2);
        assert_eq!(devices_for(&[Profile::Raid1, Profile::Raid1c4]), 4);
        assert_eq!(devices_for(&[Profile::Single, Profile::Dup]), 1);
        assert_eq!(device_size_for(6000), 1 << 30);
        assert_eq!(device_size_for(1_000_000), 2466 << 20);

        let p = plan(&opts(&[Profile::Raid1, Profile::Raid1c3]), "abc123", vec![]).unwrap();
        assert_eq!(p.devices, 3);
        assert_eq!(p.runs.len(), 2);
        for r in &p.runs {
            assert_eq!(r.sandbox.images.len(), 3);
            assert_eq!(r.sandbox.size_bytes, p.device_size_bytes);
            assert_eq!(r.sandbox.data, Some(Profile::Single));
        }
        assert_eq!(p.runs[1].sandbox.name, "bench-abc123-raid1c3");
        assert_eq!(
            p.runs[1].sandbox.dir,
            PathBuf::from("/var/tmp/btrfs-lab/bench-abc123-raid1c3")
        );
        let steps = p.describe();
        assert!(
            steps.iter().any(|s| s
                == "  run: mkfs.btrfs -q -L btrfs-lab-bench-abc123-raid1c3 -d single -m raid1c3 '<loop0>' '<loop1>' '<loop2>'"),
            "{steps:#?}"
        );
        // DIR given: the sandboxes go under it.
        let mut o = opts(&[Profile::Raid1]);
        o.images_dir = Some(PathBuf::from("/srv/fast"));
        let p = plan(&o, "n", vec!["bench-old-raid1".into()]).unwrap();
        assert_eq!(
            p.runs[0].sandbox.dir,
            PathBuf::from("/srv/fast/bench-n-raid1")
        );
        assert!(p.describe()[0].contains("btrfs-lab sandbox down --yes bench-old-raid1"));
        // Bad numbers are refused before anything.
        let mut o = opts(&[Profile::Raid1]);
        o.files = 5;
        assert_eq!(plan(&o, "n", vec![]).unwrap_err().exit_code(), 2);
    }

    #[test]
    fn ratios_are_against_the_baseline() {
        let ph = |name: &str, fps: f64, sync: Option<f64>, bytes: u64| Phase {
            name: name.into(),
            files: 1000,
            seconds: 1000.0 / fps,
            files_per_sec: fps,
            sync_seconds: sync,
            files_per_sec_with_sync: fps / 2.0,
            device_write_bytes: bytes,
            per_member: vec![],
        };
        let base = vec![
            ph("create", 1000.0, Some(0.5), 100),
            ph("stat", 4000.0, None, 0),
        ];
        let other = vec![
            ph("create", 800.0, Some(1.0), 150),
            ph("stat", 4000.0, None, 0),
        ];
        let r = ratios(&other, &base);
        assert_eq!(r[0].files_per_sec, Some(0.8));
        assert_eq!(r[0].sync_seconds, Some(2.0));
        assert_eq!(r[0].device_write_bytes, Some(1.5));
        assert_eq!(r[1].files_per_sec, Some(1.0));
        assert_eq!(r[1].sync_seconds, None);
        assert_eq!(r[1].device_write_bytes, None, "0 bytes: no ratio");
    }
}
