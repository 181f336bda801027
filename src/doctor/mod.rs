//! `doctor`: one read-only look at each mounted btrfs that ranks what is
//! wrong, worst first, with the numbers, why it matters and the command to
//! run. Facts are read once ([`gather`]), findings computed by pure code
//! ([`analyse::analyse`]), and the report rendered as text, JSON or
//! Prometheus metrics ([`prometheus`]).

pub(crate) mod analyse;
pub mod deep;
pub mod facts;
pub mod fstab;
pub mod leftovers;
pub mod members;
pub mod notify;
pub mod prometheus;
pub mod scrub;
pub mod upgrade;
pub mod widths;

use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use crate::error::Result;
use crate::model::finding::{Finding, Severity};
use crate::report::envelope::{hostname, rfc3339_seconds};
use crate::space::{self, BtrfsTarget};
use crate::sys::fs::outfile;
use crate::sys::fs::root::SysRoot;
use crate::sys::kernel::btrfs::{self, bg_type_of, profile_of};

pub use facts::FsFacts;

/// Exit status: no warning or critical finding.
pub const EXIT_OK: u8 = crate::model::exit::HEALTHY.code;
/// Exit status: the worst finding is a warning.
pub(crate) const EXIT_WARNING: u8 = crate::model::exit::WARNING.code;
/// Exit status: a critical finding.
pub(crate) const EXIT_CRITICAL: u8 = crate::model::exit::CRITICAL.code;
/// Exit status: doctor could not look (not a btrfs, not root, ...), as
/// monitoring plugins' UNKNOWN.
pub const EXIT_UNKNOWN: u8 = crate::model::exit::UNKNOWN.code;

/// One filesystem: what was read, and what was found.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct FsDiagnosis {
    /// Mount point.
    pub mount_point: PathBuf,
    /// Filesystem UUID.
    pub uuid: String,
    /// The worst finding's severity (none: no finding at all).
    pub worst: Option<Severity>,
    /// Findings, worst first.
    pub findings: Vec<Finding>,
    /// What the findings were computed from.
    pub facts: FsFacts,
    /// What `--deep` found out (absent without it).
    #[serde(default)]
    pub deep: Option<deep::DeepFacts>,
    /// What `--before-upgrade VERSION` compared (absent without it): the
    /// findings that say what changes are among `findings`.
    #[serde(default)]
    pub before_upgrade: Option<upgrade::BeforeUpgrade>,
}

/// A filesystem doctor was asked to examine and could not (ripgrep's
/// non-fatal errors: the others are still examined and reported).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct NotExamined {
    /// The path given (or the mount point found).
    pub path: PathBuf,
    /// What went wrong, one line.
    pub error: String,
    /// What to do, when known.
    pub hint: Option<String>,
}

impl NotExamined {
    fn new(path: &Path, e: &crate::error::Error) -> Self {
        Self {
            path: path.to_path_buf(),
            error: e.message().to_owned(),
            hint: e.hint().map(str::to_owned),
        }
    }
}

/// The whole report. Who wrote it, on which host and when is the JSON
/// envelope's (`btrfs_lab`, docs/json.md); the older top-level `tool`,
/// `version`, `hostname` and `timestamp` fields are written from the same
/// sources when the report is serialized ([`wire`]), not kept twice here.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(into = "wire::DoctorReport", from = "wire::DoctorReport")]
pub struct DoctorReport {
    /// When the filesystems were examined, seconds since the epoch.
    pub timestamp_unix: u64,
    /// Each filesystem examined.
    pub filesystems: Vec<FsDiagnosis>,
    /// The filesystems that could not be examined (the others still were).
    pub not_examined: Vec<NotExamined>,
    /// The worst finding over all filesystems.
    pub worst: Option<Severity>,
    /// The exit status: 0 ok (or info only), 1 warning, 2 critical; 3 when
    /// a filesystem could not be examined and nothing is worse than info.
    pub exit_status: u8,
}

/// The JSON shape of `doctor --json` (docs/json.md, docs/schema/
/// doctor.schema.json), unchanged: the report's fields and the older
/// `tool`/`version`/`hostname`/`timestamp` beside the envelope.
pub(crate) mod wire {
    use super::*;

    /// `doctor --json`.
    #[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
    pub struct DoctorReport {
        /// `btrfs-lab`.
        pub tool: String,
        /// Its version (as the envelope's `version`).
        pub version: String,
        /// The host examined (uname's nodename, as the envelope's `host`).
        pub hostname: String,
        /// When the filesystems were examined, UTC (RFC 3339).
        pub timestamp: String,
        /// When, seconds since the epoch.
        pub timestamp_unix: u64,
        /// Each filesystem examined.
        pub filesystems: Vec<FsDiagnosis>,
        /// The filesystems that could not be examined (the others still
        /// were): path, error, hint.
        #[serde(default)]
        pub not_examined: Vec<NotExamined>,
        /// The worst finding over all filesystems.
        pub worst: Option<Severity>,
        /// The exit status: 0 ok (or info only), 1 warning, 2 critical; 3
        /// when a filesystem could not be examined and nothing is worse
        /// than info.
        pub exit_status: u8,
    }

    impl From<super::DoctorReport> for DoctorReport {
        fn from(r: super::DoctorReport) -> Self {
            Self {
                tool: "btrfs-lab".to_owned(),
                version: env!("CARGO_PKG_VERSION").to_owned(),
                hostname: hostname(),
                timestamp: rfc3339_seconds(r.timestamp_unix),
                timestamp_unix: r.timestamp_unix,
                filesystems: r.filesystems,
                not_examined: r.not_examined,
                worst: r.worst,
                exit_status: r.exit_status,
            }
        }
    }

    impl From<DoctorReport> for super::DoctorReport {
        fn from(r: DoctorReport) -> Self {
            Self {
                timestamp_unix: r.timestamp_unix,
                filesystems: r.filesystems,
                not_examined: r.not_examined,
                worst: r.worst,
                exit_status: r.exit_status,
            }
        }
    }
}

/// The exit status for a worst severity.
pub fn exit_status(worst: Option<Severity>) -> u8 {
    match worst {
        Some(Severity::Critical) => EXIT_CRITICAL,
        Some(Severity::Warning) => EXIT_WARNING,
        _ => EXIT_OK,
    }
}

/// The exit status when something could not be done (a filesystem not
/// examined, the output or the textfile not written): UNKNOWN (3) when
/// nothing is worse than info, so that monitoring notices; a warning or a
/// critical finding is never hidden behind it (the critical
/// `data-nearly-full` of the very filesystem that could not take the
/// textfile must reach monitoring).
pub fn status_with_failure(findings: u8, failed: bool) -> u8 {
    if failed && findings == EXIT_OK {
        EXIT_UNKNOWN
    } else {
        findings
    }
}

/// Diagnoses one filesystem from its facts.
pub(crate) fn diagnose(facts: FsFacts, now: u64) -> FsDiagnosis {
    let findings = analyse::analyse(&facts, now);
    FsDiagnosis {
        mount_point: facts.mount_point.clone(),
        uuid: facts.uuid.clone(),
        worst: findings.iter().map(|f| f.severity).min(),
        findings,
        facts,
        deep: None,
        before_upgrade: None,
    }
}

/// Adds the `--deep` findings to a diagnosis.
pub(crate) fn add_deep(d: &mut FsDiagnosis, findings: Vec<Finding>, facts: deep::DeepFacts) {
    add_findings(d, findings);
    d.deep = Some(facts);
}

/// Adds findings to a diagnosis, keeping it ranked.
pub(crate) fn add_findings(d: &mut FsDiagnosis, findings: Vec<Finding>) {
    d.findings.extend(findings);
    crate::model::finding::rank(&mut d.findings);
    analyse::quiet_beside_missing(&mut d.findings);
    d.worst = d.findings.iter().map(|f| f.severity).min();
}

/// Builds the report from diagnoses and the filesystems that could not be
/// examined.
pub fn report(
    filesystems: Vec<FsDiagnosis>,
    not_examined: Vec<NotExamined>,
    now: u64,
) -> DoctorReport {
    let worst = filesystems.iter().filter_map(|f| f.worst).min();
    let exit_status = status_with_failure(exit_status(worst), !not_examined.is_empty());
    DoctorReport {
        timestamp_unix: now,
        filesystems,
        not_examined,
        worst,
        exit_status,
    }
}

/// The largest fstab read (`--fstab FILE`, /etc/fstab): 1 MiB.
const FSTAB_CAP: u64 = 1 << 20;

/// What `doctor` looks at.
#[derive(Debug, Clone)]
pub struct DoctorOptions {
    /// Where sysfs and procfs are read (`--sysroot`).
    pub sysroot: SysRoot,
    /// Paths inside mounted btrfs filesystems; empty: every mounted btrfs.
    pub mounts: Vec<PathBuf>,
    /// Also run the checks that cost time or write a little ([`deep`]).
    pub deep: bool,
    /// `--deep-dir`: more directories for `--deep` to probe (each on one of
    /// the filesystems examined; implies `deep`).
    pub deep_dirs: Vec<PathBuf>,
    /// Also write the Prometheus metrics there (`--textfile`).
    pub textfile: Option<PathBuf>,
    /// `--allow-untrusted-target`: write the textfile even where another
    /// user can change it ([`outfile::OutputDir::allow_untrusted`]).
    pub allow_untrusted_target: bool,
    /// The fstab to audit (`--fstab FILE`); `None`: `/etc/fstab` when it
    /// exists.
    pub fstab: Option<PathBuf>,
    /// btrfs-lab's state directory (`--state-dir`: its `scrub/` holds what
    /// `btrfs-lab scrub` saved, its `members/` what doctor saw of each
    /// filesystem's members); `None`: the sysroot's `/var/lib/btrfs-lab`.
    pub state_dir: Option<PathBuf>,
    /// `--notify`: where a member's new state and rising error counters
    /// are told.
    pub notify: Option<notify::Notify>,
    /// `--before-upgrade VERSION`: also say what changes for each
    /// filesystem on that kernel ([`upgrade`]; a version
    /// [`crate::model::kernel::parse_version_arg`] takes).
    pub before_upgrade: Option<String>,
}

/// What a doctor run ends with (an interruption is the `Err` of [`run`]).
#[derive(Debug)]
pub enum Outcome {
    /// The report. `textfile_error`: the `--textfile` could not be written
    /// (its message says what the file holds now).
    Report {
        /// The report.
        report: DoctorReport,
        /// Why the textfile could not be written.
        textfile_error: Option<crate::error::Error>,
        /// What else failed, said and counted as output not written: the
        /// members' record could not be saved, an event not told.
        problems: Vec<crate::error::Error>,
    },
    /// Doctor could not look at anything (UNKNOWN, [`EXIT_UNKNOWN`]): one
    /// error per filesystem given (the last says what the textfile holds
    /// now). Nothing goes to stdout.
    Unknown(Vec<crate::error::Error>),
}

/// Runs doctor with its error policy: a filesystem that cannot be examined
/// is reported ([`NotExamined`], exit status 3 when nothing is worse) and
/// the others are still examined; when none could be, the outcome is
/// [`Outcome::Unknown`]; either way a `--textfile` is written (or made to
/// say `btrfs_lab_doctor_success 0`). `Err` only for an interruption
/// (SIGINT, SIGTERM, SIGHUP during `--deep`: exit 130).
pub fn run(opts: &DoctorOptions) -> Result<Outcome> {
    if opts.deep || !opts.deep_dirs.is_empty() {
        // The probe stops at its next safe point on SIGINT, SIGTERM or
        // SIGHUP, removes its test files and trace instance, and doctor
        // exits 130 (a second signal exits at once).
        crate::sys::kernel::signals::install()?;
    }
    // The fstab is read once: an explicit one that cannot be read is an
    // error, a missing /etc/fstab only means no audit of it.
    let fstab = match &opts.fstab {
        // Bytes, not UTF-8: a path in fstab may be in another encoding.
        Some(p) => match crate::sys::fs::input::read_user_file(p, FSTAB_CAP) {
            Ok(bytes) => Some((
                p.display().to_string(),
                String::from_utf8_lossy(&bytes).into_owned(),
            )),
            // A failure like any other: UNKNOWN, the textfile says so.
            Err(e) => {
                let e = e.with_hint("--fstab takes a regular file in fstab(5) format");
                return Ok(Outcome::Unknown(fail_textfile(vec![e], opts)));
            }
        },
        None => {
            let p = opts.sysroot.prefix().join("etc/fstab");
            opts.sysroot
                .read_bytes(&p, FSTAB_CAP as usize)
                .ok()
                .map(|b| {
                    (
                        "/etc/fstab".to_owned(),
                        String::from_utf8_lossy(&b).into_owned(),
                    )
                })
        }
    };
    let scrub_store = crate::scrub::StateStore::new(&opts.state_dir.clone().unwrap_or_else(|| {
        opts.sysroot
            .prefix()
            .join(crate::scrub::STATE_DIR.trim_start_matches('/'))
    }));
    let deep = (opts.deep || !opts.deep_dirs.is_empty()).then_some(opts.deep_dirs.as_slice());
    let report = match examine(
        &opts.sysroot,
        &scrub_store,
        &opts.mounts,
        deep,
        fstab.as_ref(),
    ) {
        Ok(r) if r.filesystems.is_empty() && !r.not_examined.is_empty() => {
            let errors = r.not_examined.iter().map(not_examined_error).collect();
            return Ok(Outcome::Unknown(fail_textfile(errors, opts)));
        }
        Ok(r) => r,
        Err(e) if e.kind() == crate::error::ErrorKind::Interrupted => return Err(e),
        Err(e) => return Ok(Outcome::Unknown(fail_textfile(vec![e], opts))),
    };
    let report = match &opts.before_upgrade {
        Some(target) => before_upgrade(report, &opts.sysroot, target),
        None => report,
    };
    // What was seen of each filesystem's members, for the next look (on
    // the host only: a --sysroot tree is another machine's); then the new
    // states told.
    let mut problems = Vec::new();
    if opts.sysroot.is_host() {
        for d in &report.filesystems {
            if let Err(e) = members::save(
                scrub_store.state_dir(),
                &members::record(&d.facts, report.timestamp_unix),
            ) {
                problems.push(
                    e.with_hint("doctor records its members' states there to tell a member that came back; give a --state-dir root holds"),
                );
            }
        }
    }
    if let Some(to) = &opts.notify {
        problems.extend(notify::tell(to, &notify::events(&report)));
    }
    let textfile_error = opts.textfile.as_deref().and_then(|path| {
        write_textfile(
            path,
            opts.allow_untrusted_target,
            &prometheus::render(&report),
        )
        .err()
        .map(|e| with_textfile_state(e, path, opts.allow_untrusted_target))
    });
    Ok(Outcome::Report {
        report,
        textfile_error,
        problems,
    })
}

/// Adds what changes on the kernel `target` to each diagnosis: the
/// running kernel's release and the kernel command line are read here,
/// the findings computed by [`upgrade::findings`]. A `space-cache-v1`
/// finding gives way to `upgrade-space-cache-v1`, which says more.
fn before_upgrade(r: DoctorReport, root: &SysRoot, target: &str) -> DoctorReport {
    let release = if root.is_host() {
        crate::sys::kernel_release()
    } else {
        root.read_attr(&root.proc("sys/kernel/osrelease"))
            .map(|s| s.trim().to_owned())
            .unwrap_or_default()
    };
    let cmdline = root.read_attr(&root.proc("cmdline")).ok();
    let mut filesystems = r.filesystems;
    for d in &mut filesystems {
        let running = if release.is_empty() {
            d.facts.kernel.clone()
        } else {
            release.clone()
        };
        let found = upgrade::findings(
            &d.facts,
            &upgrade::Upgrade {
                target,
                running: &running,
                cmdline: cmdline.as_deref(),
            },
        );
        let codes: Vec<_> = found.iter().map(|f| f.code).collect();
        if codes.contains(&crate::model::finding::Code::UpgradeSpaceCacheV1) {
            d.findings
                .retain(|f| f.code != crate::model::finding::Code::SpaceCacheV1);
        }
        add_findings(d, found);
        // What a missing member left said (quiet_beside_missing).
        let changes = codes
            .into_iter()
            .filter(|c| d.findings.iter().any(|f| f.code == *c))
            .collect();
        d.before_upgrade = Some(upgrade::BeforeUpgrade {
            target: target.to_owned(),
            running,
            changes,
        });
    }
    report(filesystems, r.not_examined, r.timestamp_unix)
}

/// Runs doctor ([`run`]) and says its errors on the `ui`: one per
/// filesystem not examined, and the textfile's. `None` when it could look at
/// nothing ([`EXIT_UNKNOWN`]); else the report and whether the textfile could
/// not be written.
pub fn run_on_ui(
    opts: &DoctorOptions,
    ui: &dyn crate::ui::Ui,
) -> Result<Option<(DoctorReport, bool)>> {
    let (report, textfile_error, problems) = match run(opts)? {
        Outcome::Unknown(errors) => {
            errors.iter().for_each(|e| ui.error(e));
            return Ok(None);
        }
        Outcome::Report {
            report,
            textfile_error,
            problems,
        } => (report, textfile_error, problems),
    };
    for n in &report.not_examined {
        ui.error(&not_examined_error(n));
    }
    textfile_error.iter().for_each(|e| ui.error(e));
    problems.iter().for_each(|e| ui.error(e));
    Ok(Some((
        report,
        textfile_error.is_some() || !problems.is_empty(),
    )))
}

/// A filesystem not examined, as the one error line it prints (naming the
/// path when the message does not).
pub fn not_examined_error(n: &NotExamined) -> crate::error::Error {
    let path = n.path.display().to_string();
    let message = if n.error.contains(&path) {
        n.error.clone()
    } else {
        format!("{path}: {}", n.error)
    };
    let e = crate::error::Error::new(crate::error::ErrorKind::WrongTarget, message);
    match &n.hint {
        Some(h) => e.with_hint(h.clone()),
        None => e,
    }
}

/// The errors of a run that could not look, the last one saying what the
/// textfile holds now.
fn fail_textfile(
    mut errors: Vec<crate::error::Error>,
    opts: &DoctorOptions,
) -> Vec<crate::error::Error> {
    if let Some(path) = &opts.textfile
        && let Some(last) = errors.pop()
    {
        errors.push(with_textfile_state(last, path, opts.allow_untrusted_target));
    }
    errors
}

/// After a failed run or write: the textfile is made to say `success 0`
/// if it can be, and the one error line says what it holds now.
pub(crate) fn with_textfile_state(
    e: crate::error::Error,
    path: &Path,
    allow_untrusted: bool,
) -> crate::error::Error {
    let p = path.display();
    let state = match mark_textfile_failed(path, allow_untrusted, now_unix()) {
        // The refusal itself says why; nothing was written.
        TextfileState::Refused(_) if e.message().starts_with("not writing ") => return e,
        TextfileState::Refused(why) => why,
        TextfileState::MarkedFailed => format!("{p} now says btrfs_lab_doctor_success 0"),
        TextfileState::MarkedFailedInPlace => format!(
            "the textfile is stale: {p} now says btrfs_lab_doctor_success 0 (rewritten in place)"
        ),
        TextfileState::Stale(why) => {
            format!("the textfile is stale: {p} still holds an earlier run's metrics ({why})")
        }
    };
    let hint = e.hint().map(str::to_owned);
    let out = crate::error::Error::new(e.kind(), format!("{}; {state}", e.message()));
    match hint {
        Some(h) => out.with_hint(h),
        None => out,
    }
}

/// Examines the filesystems at `mounts` (every mounted btrfs when empty);
/// `deep` adds the checks that cost time or write a little ([`deep`]), with
/// the `--deep-dir` directories it holds (each probed on the filesystem it
/// is on; one on none of them is not examined). A
/// filesystem that cannot be resolved or read is in `not_examined` and the
/// others are still examined; `Err` when doctor cannot look at all (not
/// root, the mount table unreadable) or was interrupted.
pub(crate) fn examine(
    root: &SysRoot,
    scrub_store: &crate::scrub::StateStore,
    mounts: &[PathBuf],
    deep: Option<&[PathBuf]>,
    fstab: Option<&(String, String)>,
) -> Result<DoctorReport> {
    // Without root the error counters and the balance state cannot be read:
    // a report would call a corrupted filesystem healthy.
    if !crate::sys::is_root() {
        return Err(crate::error::Error::new(
            crate::error::ErrorKind::Permission,
            "doctor needs root: the device error counters and the balance state are root-only ioctls",
        )
        .with_hint("run it as root (sudo btrfs-lab doctor), as the systemd unit and the playbooks do"));
    }
    let mut not_examined = Vec::new();
    let targets: Vec<BtrfsTarget> = if mounts.is_empty() {
        space::mounted_btrfs(root)?
    } else {
        mounts
            .iter()
            .filter_map(|m| match space::resolve(root, m) {
                Ok(t) => Some(t),
                Err(e) => {
                    not_examined.push(NotExamined::new(m, &e));
                    None
                }
            })
            .collect()
    };
    // Each --deep-dir with the filesystem it is on (opened as probe-dio
    // opens its directory: no link of another user followed).
    let asked: Vec<(PathBuf, String)> = deep
        .unwrap_or_default()
        .iter()
        .filter_map(|dir| {
            let on = crate::sys::fs::beneath::HeldDir::open(dir)
                .and_then(|h| Ok((h.path().to_path_buf(), h.btrfs_fsid()?)));
            match on {
                Ok((p, fsid)) if targets.iter().any(|t| t.fsid == fsid) => Some((p, fsid)),
                Ok(_) => {
                    not_examined.push(NotExamined {
                        path: dir.clone(),
                        error: "--deep-dir: not on a filesystem doctor examines".to_owned(),
                        hint: Some(
                            "give a directory on one of the filesystems examined (MOUNT)"
                                .to_owned(),
                        ),
                    });
                    None
                }
                Err(e) => {
                    not_examined.push(NotExamined::new(
                        dir,
                        &e.with_hint("--deep-dir takes a directory on a mounted btrfs"),
                    ));
                    None
                }
            }
        })
        .collect();
    let now = now_unix();
    // The O_DIRECT users (apps), read once for every filesystem.
    let apps = crate::apps::analyse(&crate::apps::gather::gather(root));
    let mut out = Vec::new();
    for t in &targets {
        let deep = deep.map(|_| {
            asked
                .iter()
                .filter(|(_, fsid)| *fsid == t.fsid)
                .map(|(p, _)| p.clone())
                .collect::<Vec<_>>()
        });
        match examine_one(root, scrub_store, t, deep.as_deref(), now, fstab) {
            Ok(mut d) => {
                add_findings(&mut d, crate::apps::findings(&apps, &t.fsid));
                out.push(d);
            }
            Err(e) if e.kind() == crate::error::ErrorKind::Interrupted => return Err(e),
            Err(e) => not_examined.push(NotExamined::new(&t.mount.mount_point, &e)),
        }
    }
    Ok(report(out, not_examined, now))
}

/// One filesystem: its facts, findings, bench leftovers and (`deep`: with
/// the `--deep-dir` directories on it) the deep checks.
fn examine_one(
    root: &SysRoot,
    scrub_store: &crate::scrub::StateStore,
    t: &BtrfsTarget,
    deep: Option<&[PathBuf]>,
    now: u64,
    fstab: Option<&(String, String)>,
) -> Result<FsDiagnosis> {
    let mut facts = gather(root, t, scrub_store)?;
    facts.fstab = fstab.map(|(path, text)| fstab_facts(root, &facts, path, text));
    if crate::space::room::wants_chunk_usage(&analyse::analyse(&facts, now)) {
        facts.data_chunks = data_chunks(t, &facts.features);
    }
    let mut d = diagnose(facts, now);
    // Work directories of dead bench runs: at the top level and in the
    // VM image and database directories doctor looks at.
    let mut places = vec![d.facts.mount_point.clone()];
    places.extend(deep::usual_dirs(&d.facts));
    add_findings(&mut d, leftovers::findings(&leftovers::scan(&places)));
    if let Some(asked) = deep {
        crate::sys::kernel::signals::check()?;
        let (findings, facts) = deep::deep(root, &d.facts, asked)?;
        add_deep(&mut d, findings, facts);
    }
    Ok(d)
}

/// The drives `path` rests on, as device paths `smartctl` takes: an NVMe
/// controller, a whole disk, the disk behind a loop device (empty when the
/// topology cannot be read: the finding then names the device itself).
fn drives_behind(root: &SysRoot, path: &str) -> Vec<String> {
    use crate::sys::block::topology::{self, BlockTarget, DeviceRef};
    let Ok(DeviceRef::Block(block)) = topology::device_ref(root, path) else {
        return Vec::new();
    };
    let mut drives: Vec<String> = topology::block_targets(root, &block)
        .unwrap_or_default()
        .into_iter()
        .map(|t| match t {
            BlockTarget::Controller(c) => format!("/dev/{c}"),
            BlockTarget::Disk { name, .. } => format!("/dev/{name}"),
        })
        .collect();
    drives.dedup();
    drives
}

/// The entries of an fstab text that are this filesystem's (a device path
/// is compared with the members' as the host resolves both).
fn fstab_facts(root: &SysRoot, f: &FsFacts, path: &str, text: &str) -> fstab::FstabFacts {
    let canon = |p: &str| -> Option<String> {
        if !root.is_host() || !p.starts_with("/dev/") {
            return None;
        }
        std::fs::canonicalize(p)
            .ok()
            .map(|c| c.display().to_string())
    };
    let mut members: Vec<String> = f.present().map(|d| d.path.clone()).collect();
    members.extend(f.present().filter_map(|d| canon(&d.path)));
    let mount = f.mount_point.display().to_string();
    fstab::FstabFacts {
        path: path.to_owned(),
        entries: fstab::parse(text)
            .into_iter()
            .filter(|e| {
                let resolved = canon(&e.spec);
                fstab::is_for(
                    e,
                    &f.uuid,
                    f.label.as_deref(),
                    &mount,
                    &members,
                    resolved.as_deref(),
                )
            })
            .collect(),
    }
}

/// The largest discard a block device takes (its queue, or its disk's for
/// a partition); `None` when sysfs does not say.
fn discard_max_bytes(root: &SysRoot, path: &str) -> Option<u64> {
    let real = crate::sys::block::blockdev::resolved(Path::new(path));
    let name = real.file_name()?.to_str()?.to_owned();
    ["queue", "../queue"].iter().find_map(|q| {
        root.read_attr(&root.sys(&format!("class/block/{name}/{q}/discard_max_bytes")))
            .ok()?
            .trim()
            .parse()
            .ok()
    })
}

/// Reads the facts of one mounted btrfs (ioctls, sysfs, the scrub record).
use crate::sys::kernel::settings;

pub(crate) fn gather(
    root: &SysRoot,
    target: &BtrfsTarget,
    scrub_store: &crate::scrub::StateStore,
) -> Result<FsFacts> {
    let state = crate::operation::state::read_state(root, &target.path)?;
    let info = btrfs::fs_info(&target.path)?;
    // What btrfs-lab runs recorded of the kernel settings they changed.
    let records: Vec<settings::Record> = scrub_store
        .ledger()
        .records()
        .map(|(_, found)| found.into_iter().filter_map(|f| f.record.ok()).collect())
        .unwrap_or_default();
    let left = |setting: &settings::Setting| {
        records
            .iter()
            .find(|r| &r.setting == setting)
            .map(|r| facts::SettingLeft {
                command: r.command.clone(),
                pid: r.pid,
                running: settings::owner_running(r),
                before: r.before,
                set: r.set,
            })
    };
    let devices = state
        .devices
        .iter()
        .map(|d| {
            let missing = d.path.is_empty();
            facts::DeviceFacts {
                devid: d.devid,
                path: if missing {
                    "missing".to_owned()
                } else {
                    d.path.clone()
                },
                missing,
                size_bytes: d.size,
                allocated_bytes: d.allocated,
                errors: state
                    .device_errors
                    .iter()
                    .find(|e| e.devid == d.devid)
                    .map(|e| facts::ErrorCounts {
                        write: e.write,
                        read: e.read,
                        flush: e.flush,
                        corruption: e.corruption,
                        generation: e.generation,
                    }),
                dev_uuid: state
                    .device_errors
                    .iter()
                    .find(|e| e.devid == d.devid && !e.dev_uuid.is_empty())
                    .map(|e| e.dev_uuid.clone()),
                drives: if missing {
                    Vec::new()
                } else {
                    drives_behind(root, &d.path)
                },
                discard_max_bytes: if missing {
                    None
                } else {
                    discard_max_bytes(root, &d.path)
                },
                scrub_speed_max: btrfs::scrub_speed_max(root, &target.fsid, d.devid),
                scrub_speed_max_by: left(&settings::Setting::ScrubSpeedMax {
                    fsid: target.fsid.clone(),
                    devid: d.devid,
                }),
                // Set below, once every member was looked at.
                state: members::MemberState::Present,
                state_since: None,
                state_new: false,
                generation: None,
                errors_before: None,
            }
        })
        .collect::<Vec<_>>();
    let spaces = state
        .spaces
        .iter()
        .map(|s| facts::SpaceUse {
            bg_type: bg_type_of(s.flags),
            profile: profile_of(s.flags),
            total_bytes: s.total_bytes,
            used_bytes: s.used_bytes,
        })
        .collect();
    let sysfs = |rel: &str| {
        root.read_attr(&root.sys(&format!("fs/btrfs/{}/{rel}", target.fsid)))
            .ok()
            .map(|s| s.trim().to_owned())
    };
    let raw: u64 = devices.iter().map(|d| d.size_bytes).sum();
    let metadata_chunk_bytes = crate::model::alloc::metadata_chunk_size(
        sysfs("allocation/metadata/chunk_size").and_then(|s| s.parse().ok()),
        raw,
    );
    let scrub = scrub::last(root, scrub_store, &target.fsid);
    let narrow_data = widths::read(root, &state);
    let mut devices = devices;
    let inputs: Vec<members::Member<'_>> = devices
        .iter()
        .map(|d| members::Member {
            devid: d.devid,
            path: &d.path,
            missing: d.missing,
        })
        .collect();
    let (now_states, before, generation) = members::now(
        root,
        &target.fsid,
        &inputs,
        info.generation,
        scrub_store.state_dir(),
        &scrub,
        now_unix(),
    );
    for (d, m) in devices.iter_mut().zip(now_states) {
        d.state = m.state;
        d.state_since = Some(m.since);
        d.state_new = m.new;
        d.generation = m.generation;
        d.errors_before = m.errors_before;
    }
    Ok(FsFacts {
        mount_point: target.mount.mount_point.clone(),
        uuid: target.fsid.clone(),
        label: sysfs("label").filter(|l| !l.is_empty()),
        // The VFS options, then btrfs' own (`degraded`, `space_cache=v2`, ...).
        mount_options: target.mount.options_text(),
        kernel: state.kernel.to_string(),
        features: state.features.clone(),
        total_devices: info.num_devices,
        devices,
        spaces,
        metadata_chunk_bytes,
        balance: state.balance.map(|b| facts::BalanceFacts {
            running: b.running,
            data_target: b.data_target,
            metadata_target: b.metadata_target,
            expected: b.expected,
            completed: b.completed,
        }),
        scrub,
        fstab: None,
        read_policy: sysfs("read_policy"),
        exclusive_operation: sysfs("exclusive_operation"),
        fstrim_timer: root
            .prefix()
            .join("etc/systemd/system/timers.target.wants/fstrim.timer")
            .exists(),
        // The kernel's scrub progress (read-only ioctls; root only).
        scrub_running: btrfs::FsHandle::open(&target.path)
            .ok()
            .and_then(|h| crate::scrub::running(&h).ok())
            .filter(|v| !v.is_empty())
            .map(|v| {
                (
                    v.iter().map(|d| d.bytes_scrubbed).sum(),
                    v.iter().map(|d| d.bytes_to_read).sum(),
                )
            }),
        scrub_timer: root.prefix().join("run/systemd/system").is_dir().then(|| {
            root.prefix()
                .join("etc/systemd/system/timers.target.wants")
                .join(crate::scrub::all::TIMER)
                .exists()
        }),
        // Read by examine_one only when a finding suggests a balance.
        data_chunks: None,
        hugepages_left: left(&settings::Setting::NrHugepages).map(|b| {
            let now = root
                .read_attr(&root.proc("sys/vm/nr_hugepages"))
                .ok()
                .and_then(|s| s.trim().parse().ok())
                .unwrap_or(b.set);
            (b, now)
        }),
        narrow_data,
        generation,
        last_look: before.map(|b| facts::LastLook {
            at: b.at,
            kernel: b.kernel,
        }),
    })
}

/// Each data chunk's usage (root only), for the exact `-dusage` value.
fn data_chunks(
    target: &BtrfsTarget,
    features: &[String],
) -> Option<Vec<crate::model::reclaim::ChunkUse>> {
    // Opened through the safe layer (no link another user owns followed).
    btrfs::FsHandle::open(&target.path)
        .ok()?
        .chunk_usage(features.iter().any(|x| x == "block_group_tree"), false)
        .ok()
        .flatten()
}

/// Seconds since the epoch.
pub(crate) fn now_unix() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// The hint of a `--textfile` that cannot be written.
const TEXTFILE_HINT: &str = "the directory must exist and be writable, with space left (node_exporter's --collector.textfile.directory)";

/// Writes `text` to the `--textfile` `path` atomically for a collector that
/// may read at any moment ([`crate::sys::fs::outfile`]): the directory is held
/// by descriptor (a link another user planted in it is refused), the new
/// content is a file unique to this run, synced, renamed over `path`.
/// Temporary files that killed runs left are removed first.
pub(crate) fn write_textfile(path: &Path, allow_untrusted: bool, text: &str) -> Result<()> {
    let (dir, name) = outfile::split(path)?;
    let dir = outfile::OutputDir::open(&dir)
        .map_err(|e| e.with_hint(TEXTFILE_HINT))?
        .allow_untrusted(allow_untrusted);
    let _ = dir.remove_stale_temps(&name);
    dir.write(&name, text.as_bytes(), 0o644)
        .map(|_| ())
        .map_err(|e| e.with_hint(TEXTFILE_HINT))
}

/// What a failed `--textfile` holds now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum TextfileState {
    /// Replaced by `btrfs_lab_doctor_success 0` (a new file).
    MarkedFailed,
    /// `btrfs_lab_doctor_success 0` written into the old file in place: a
    /// new file could not be made (a full filesystem).
    MarkedFailedInPlace,
    /// Neither worked: the file still holds an earlier run's metrics.
    Stale(String),
    /// Not touched: the destination is not one btrfs-lab writes (not a
    /// regular file, or another user's without `--allow-untrusted-target`).
    Refused(String),
}

/// After a failure, makes the `--textfile` say `btrfs_lab_doctor_success 0`:
/// a new file if one can be made, else the old one rewritten in place, so
/// that monitoring does not keep reading an earlier run's healthy metrics.
pub(crate) fn mark_textfile_failed(path: &Path, allow_untrusted: bool, now: u64) -> TextfileState {
    let text = prometheus::render_failure(now);
    let attempt = || -> Result<TextfileState> {
        let (dir, name) = outfile::split(path)?;
        let dir = outfile::OutputDir::open(&dir)?.allow_untrusted(allow_untrusted);
        if let Err(e) = dir.check_destination(&name) {
            return Ok(TextfileState::Refused(e.message().to_owned()));
        }
        let _ = dir.remove_stale_temps(&name);
        match dir.write(&name, text.as_bytes(), 0o644) {
            Ok(_) => Ok(TextfileState::MarkedFailed),
            Err(first) => match dir.rewrite_in_place(&name, text.as_bytes()) {
                Ok(_) => Ok(TextfileState::MarkedFailedInPlace),
                Err(e) if e.kind() == crate::error::ErrorKind::NotFound => {
                    Ok(TextfileState::Stale(first.message().to_owned()))
                }
                Err(e) => Ok(TextfileState::Stale(e.message().to_owned())),
            },
        }
    };
    attempt().unwrap_or_else(|e| TextfileState::Stale(e.message().to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_status_follows_the_worst() {
        assert_eq!(exit_status(None), 0);
        assert_eq!(exit_status(Some(Severity::Info)), 0);
        assert_eq!(exit_status(Some(Severity::Warning)), 1);
        assert_eq!(exit_status(Some(Severity::Critical)), 2);
    }

    #[test]
    fn a_filesystem_not_examined_is_unknown_unless_something_is_worse() {
        let bad = || {
            vec![NotExamined {
                path: "/x".into(),
                error: "not a btrfs".into(),
                hint: None,
            }]
        };
        assert_eq!(report(Vec::new(), Vec::new(), 7).exit_status, EXIT_OK);
        assert_eq!(report(Vec::new(), bad(), 7).exit_status, EXIT_UNKNOWN);
        assert_eq!(status_with_failure(EXIT_WARNING, true), EXIT_WARNING);
        assert_eq!(status_with_failure(EXIT_CRITICAL, true), EXIT_CRITICAL);
        assert_eq!(status_with_failure(EXIT_OK, false), EXIT_OK);
        // The JSON keeps its shape: the older fields beside the report's.
        let v = serde_json::to_value(report(Vec::new(), bad(), 1_796_082_666)).unwrap();
        assert_eq!(v["tool"], "btrfs-lab");
        assert_eq!(v["version"], env!("CARGO_PKG_VERSION"));
        assert_eq!(v["hostname"], hostname());
        assert_eq!(v["timestamp"], "2026-11-30T23:51:06Z");
        assert_eq!(v["not_examined"][0]["path"], "/x");
        let back: DoctorReport = serde_json::from_value(v).unwrap();
        assert_eq!(back, report(Vec::new(), bad(), 1_796_082_666));
        assert_eq!(not_examined_error(&bad()[0]).message(), "/x: not a btrfs");
        assert!(
            prometheus::render(&report(Vec::new(), bad(), 7))
                .contains("btrfs_lab_doctor_success 0\n")
        );
    }

    #[test]
    fn textfile_is_replaced_atomically_and_temp_removed() {
        let t = tempfile::tempdir().unwrap();
        let dir = t.path();
        let p = dir.join("btrfs.prom");
        write_textfile(&p, false, "a 1\n").unwrap();
        write_textfile(&p, false, "a 2\n").unwrap();
        assert_eq!(std::fs::read_to_string(&p).unwrap(), "a 2\n");
        let names: Vec<_> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names.len(), 1, "{names:?}");
        let e = write_textfile(&dir.join("nope/x.prom"), false, "").unwrap_err();
        assert!(e.hint().is_some_and(|h| h.contains("textfile")));
        assert_eq!(
            mark_textfile_failed(&p, false, 7),
            TextfileState::MarkedFailed
        );
        let text = std::fs::read_to_string(&p).unwrap();
        assert!(text.contains("btrfs_lab_doctor_success 0\n"), "{text}");
        assert!(matches!(
            mark_textfile_failed(&dir.join("nope/x.prom"), false, 7),
            TextfileState::Stale(_)
        ));
    }
}
