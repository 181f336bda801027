//! `btrfs-lab apps [MOUNT]`: the O_DIRECT users on btrfs (QEMU processes,
//! libvirt domains, MariaDB/MySQL, PostgreSQL, loop devices, any process
//! with a file open O_DIRECT), each one's files, whether they are NOCOW,
//! what this kernel is expected to do with their O_DIRECT writes
//! ([`crate::probe::expect`]: expected, not measured; `probe-dio` measures)
//! and the change to make. [`gather`] reads the system into [`Facts`];
//! [`analyse`] is pure and makes the [`AppsReport`]; [`findings`] are
//! doctor's `app-dio-fallback` per application.

pub mod config;
pub mod gather;

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::model::finding::{Code, Finding};
use crate::model::profile::Profile;
use crate::probe::verdict::Verdict;
use crate::report::text::display_argv;
use crate::sys::fs::root::SysRoot;

/// What kind of O_DIRECT user.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum AppKind {
    /// A running QEMU process (its command line).
    Qemu,
    /// A libvirt domain (`/etc/libvirt/qemu/*.xml`).
    Libvirt,
    /// MariaDB or MySQL (option files, a running server).
    Mysql,
    /// PostgreSQL (postgresql.conf, postgresql.auto.conf, a running server).
    Postgresql,
    /// A loop device (`/sys/block/loopN/loop`).
    Loop,
    /// Any other process with a file open O_DIRECT (fdinfo flags).
    Process,
}

impl AppKind {
    /// The name in text and JSON.
    pub fn name(self) -> &'static str {
        match self {
            AppKind::Qemu => "qemu",
            AppKind::Libvirt => "libvirt",
            AppKind::Mysql => "mysql",
            AppKind::Postgresql => "postgresql",
            AppKind::Loop => "loop",
            AppKind::Process => "process",
        }
    }
}

/// Where a file is: what [`gather`] found about it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Place {
    /// Filesystem type (null: not looked at or not found).
    pub fs_type: Option<String>,
    /// btrfs filesystem UUID.
    pub fsid: Option<String>,
    /// The mount point that contains it.
    #[serde(serialize_with = "crate::report::text::lossy_opt_path")]
    pub mount_point: Option<PathBuf>,
    /// Data profiles of its btrfs.
    pub data_profiles: Vec<Profile>,
    /// The file (or the directory, for a data directory) is NOCOW (null:
    /// not btrfs or not known).
    pub nocow: Option<bool>,
    /// Why something is not known.
    pub note: Option<String>,
}

/// An application as found, before the analysis.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Found {
    /// Its kind.
    pub kind: AppKind,
    /// `pid 42 (qemu-system-x86_64)`, `domain vm1`, `/dev/loop3`.
    pub name: String,
    /// Where its setting was read (`/proc/42/cmdline`, `/etc/mysql/my.cnf:12`).
    pub source: String,
    /// Its process.
    pub pid: Option<u32>,
    /// The setting that decides O_DIRECT, in its own words.
    pub setting: String,
    /// It writes with O_DIRECT (null: depends on what is not known here,
    /// such as the server version).
    pub o_direct: Option<bool>,
    /// Its files, with what was found about each.
    pub files: Vec<(PathBuf, Place)>,
}

/// What [`gather`] read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Facts {
    /// `uname -r`.
    pub kernel: String,
    /// The applications.
    pub found: Vec<Found>,
    /// What could not be read.
    pub notes: Vec<String>,
}

/// One file of an application.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct AppFile {
    /// The file, device or data directory.
    #[serde(serialize_with = "crate::report::text::lossy_path")]
    pub path: PathBuf,
    /// What it is on.
    #[serde(flatten)]
    pub place: Place,
    /// What this kernel is expected to do with O_DIRECT writes to it
    /// (probe-dio's verdicts; expected from the kernel version, profile and
    /// NOCOW, not measured); null: no O_DIRECT writes, not btrfs, or the
    /// version does not tell.
    pub expected: Option<Verdict>,
    /// Why (probe-dio's expectation, with the commits).
    pub basis: String,
    /// What that costs, in words.
    pub cost: String,
    /// The command that measures it.
    pub measure: Option<String>,
}

/// One application.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct App {
    /// Its kind.
    pub kind: AppKind,
    /// Its name.
    pub name: String,
    /// Where its setting was read.
    pub source: String,
    /// Its process.
    pub pid: Option<u32>,
    /// The setting that decides O_DIRECT.
    pub setting: String,
    /// It writes with O_DIRECT (null: not known).
    pub o_direct: Option<bool>,
    /// Its files.
    pub files: Vec<AppFile>,
    /// The worst expected verdict over its files.
    pub verdict: Option<Verdict>,
    /// The change to make (or none).
    pub change: String,
    /// What the change gives up.
    pub tradeoff: String,
}

/// `apps --json`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct AppsReport {
    /// The kernel release the expectations are for.
    pub kernel: String,
    /// The applications found.
    pub apps: Vec<App>,
    /// Applications whose O_DIRECT writes are expected to fall back to
    /// buffered writes (buffered-fallback or profile-forced).
    pub falling_back: usize,
    /// What could not be read.
    pub notes: Vec<String>,
}

fn severity_rank(v: Verdict) -> u8 {
    match v {
        Verdict::ProfileForced => 4,
        Verdict::BufferedFallback => 3,
        Verdict::DirectBounced => 2,
        Verdict::Inconclusive => 1,
        Verdict::Direct => 0,
    }
}

fn falls_back(v: Option<Verdict>) -> bool {
    matches!(v, Some(Verdict::BufferedFallback | Verdict::ProfileForced))
}

/// What a verdict costs.
pub fn cost(v: Verdict, nocow: bool) -> &'static str {
    match v {
        Verdict::Direct if nocow => {
            "none for speed: written directly; NOCOW data has no btrfs checksums (bit rot goes unnoticed by scrub)"
        }
        Verdict::Direct => "none: written directly",
        Verdict::DirectBounced => {
            "one memory copy per write (a bounce buffer); checksums kept, the page cache not used"
        }
        Verdict::BufferedFallback => {
            "every O_DIRECT write goes through the page cache: copied, written back later, cached twice (in the app and in the page cache), and the latency O_DIRECT promised is lost"
        }
        Verdict::ProfileForced => {
            "every O_DIRECT write goes through the page cache because the data profile keeps copies, NOCOW files included: NOCOW does not help"
        }
        Verdict::Inconclusive => "not known",
    }
}

/// The app's own setting that avoids O_DIRECT (checksums kept, buffered by
/// choice).
fn buffered_setting(kind: AppKind) -> &'static str {
    match kind {
        AppKind::Qemu => "-drive ...,cache=writeback (or cache.direct=off)",
        AppKind::Libvirt => "<driver ... cache='writeback'/> (virsh edit DOMAIN)",
        AppKind::Mysql => {
            "innodb_flush_method = fsync in [mysqld] (MariaDB 11.0 and later: innodb_data_file_buffering = ON)"
        }
        AppKind::Postgresql => "debug_io_direct = '' (the default)",
        AppKind::Loop => "losetup --direct-io=off DEVICE",
        AppKind::Process => "the program's own option to open its files without O_DIRECT",
    }
}

/// What the app checks itself once btrfs no longer does (NOCOW).
fn own_checksums(kind: AppKind) -> &'static str {
    match kind {
        AppKind::Qemu | AppKind::Libvirt | AppKind::Loop => {
            "a VM image has no checksums of its own: the guest's filesystem is all that is left"
        }
        AppKind::Mysql => "InnoDB's page checksums (innodb_checksum_algorithm) stay",
        AppKind::Postgresql => {
            "PostgreSQL's data checksums stay if the cluster has them (initdb --data-checksums, the default from 18; SHOW data_checksums)"
        }
        AppKind::Process => "whatever checksums the program keeps itself",
    }
}

fn dir_of(p: &std::path::Path, is_dir: bool) -> PathBuf {
    if is_dir {
        p.to_path_buf()
    } else {
        p.parent()
            .map_or_else(|| p.to_path_buf(), |d| d.to_path_buf())
    }
}

/// `btrfs-lab apps [MOUNT]`: gathers and analyses, the applications on
/// `mount`'s filesystem only when one is given. A `--sysroot` that is not a
/// directory is refused (nothing would be found in it).
pub fn run(root: &SysRoot, mount: Option<&std::path::Path>) -> crate::error::Result<AppsReport> {
    if !root.is_host() && !root.prefix().is_dir() {
        return Err(crate::error::Error::new(
            crate::error::ErrorKind::NotFound,
            format!("sysroot {} is not a directory", root.prefix().display()),
        )
        .with_hint(
            "give --sysroot a directory laid out like / (etc/, and proc/ and sys/ if captured)",
        ));
    }
    let fsid = match mount {
        Some(m) => Some(crate::sys::fs::target::resolve(root, m)?.fsid),
        None => None,
    };
    let mut report = analyse(&gather::gather(root));
    if let Some(fsid) = &fsid {
        only_on(&mut report, fsid);
    }
    Ok(report)
}

/// The report from the facts: pure code.
pub fn analyse(facts: &Facts) -> AppsReport {
    let mut apps: Vec<App> = facts.found.iter().map(|f| app(&facts.kernel, f)).collect();
    apps.sort_by(|a, b| {
        let r = |x: &App| x.verdict.map_or(0, severity_rank);
        r(b).cmp(&r(a))
            .then(a.kind.cmp(&b.kind))
            .then(a.name.cmp(&b.name))
    });
    AppsReport {
        kernel: facts.kernel.clone(),
        falling_back: apps.iter().filter(|a| falls_back(a.verdict)).count(),
        apps,
        notes: facts.notes.clone(),
    }
}

fn app(kernel: &str, f: &Found) -> App {
    let data_dir = matches!(f.kind, AppKind::Mysql | AppKind::Postgresql);
    let files: Vec<AppFile> = f
        .files
        .iter()
        .map(|(path, place)| file(kernel, f, path, place, data_dir))
        .collect();
    let verdict = files
        .iter()
        .filter_map(|x| x.expected)
        .max_by_key(|v| severity_rank(*v));
    let (change, tradeoff) = change(f, &files, verdict);
    App {
        kind: f.kind,
        name: f.name.clone(),
        source: f.source.clone(),
        pid: f.pid,
        setting: f.setting.clone(),
        o_direct: f.o_direct,
        files,
        verdict,
        change,
        tradeoff,
    }
}

fn file(kernel: &str, f: &Found, path: &std::path::Path, place: &Place, data_dir: bool) -> AppFile {
    let measure_dir = || {
        let d = dir_of(path, data_dir);
        display_argv(&["btrfs-lab", "probe-dio", &d.to_string_lossy()])
    };
    let (expected, basis, measure) = match (&place.fs_type, f.o_direct) {
        (_, Some(false)) => (
            None,
            "not opened with O_DIRECT: buffered by choice, nothing falls back".to_owned(),
            None,
        ),
        (None, _) => (
            None,
            place
                .note
                .clone()
                .unwrap_or_else(|| "where it is was not found".to_owned()),
            None,
        ),
        (Some(fs), _) => {
            let x = crate::probe::expect::expect(
                kernel,
                fs,
                &place.data_profiles,
                place.nocow == Some(true),
                Verdict::Inconclusive,
            );
            let measure = match f.pid {
                Some(pid) if f.o_direct == Some(true) => Some(format!(
                    "{} (its writes now), or {}",
                    display_argv(&["btrfs-lab", "probe-dio", "--pid", &pid.to_string()]),
                    measure_dir()
                )),
                _ => (fs == "btrfs").then(measure_dir),
            };
            (
                x.verdict,
                format!("expected, not measured: {}", x.basis),
                measure,
            )
        }
    };
    let cost = match (expected, f.o_direct) {
        (Some(v), Some(true)) => cost(v, place.nocow == Some(true)).to_owned(),
        (Some(v), None) => format!(
            "if it writes with O_DIRECT: {}",
            cost(v, place.nocow == Some(true))
        ),
        _ if place.nocow == Some(true) => "no btrfs checksums on NOCOW data".to_owned(),
        _ => "none".to_owned(),
    };
    AppFile {
        path: path.to_path_buf(),
        place: place.clone(),
        expected,
        basis,
        cost,
        measure,
    }
}

fn change(f: &Found, files: &[AppFile], verdict: Option<Verdict>) -> (String, String) {
    let dirs: Vec<String> = {
        let mut d: Vec<String> = files
            .iter()
            .filter(|x| falls_back(x.expected))
            .map(|x| {
                dir_of(
                    &x.path,
                    matches!(f.kind, AppKind::Mysql | AppKind::Postgresql),
                )
                .to_string_lossy()
                .into_owned()
            })
            .collect();
        d.sort();
        d.dedup();
        d
    };
    let stop = match f.kind {
        AppKind::Qemu | AppKind::Libvirt => "shut the VM down, then ",
        AppKind::Mysql | AppKind::Postgresql => "stop the server, then ",
        AppKind::Loop => "detach the loop device, then ",
        AppKind::Process => "stop the program, then ",
    };
    let setting = buffered_setting(f.kind);
    let own = own_checksums(f.kind);
    match verdict {
        Some(Verdict::BufferedFallback) => {
            let migrate: Vec<String> = dirs
                .iter()
                .map(|d| display_argv(&["btrfs-lab", "nocow", "--migrate", d]))
                .collect();
            (
                format!(
                    "either {stop}move the files into a NOCOW directory ({}): O_DIRECT becomes direct; \
                     or set {setting}: buffered by choice, checksums kept; or accept the fallback \
                     (a 7.3 or later kernel bounces instead: direct, one copy)",
                    migrate.join("; ")
                ),
                format!(
                    "NOCOW files have no btrfs checksums and are never compressed ({own}); the app setting keeps \
                     checksums and pays the page cache"
                ),
            )
        }
        Some(Verdict::ProfileForced) => (
            format!(
                "NOCOW does not help here (the data profile keeps copies): set {setting} (buffered by choice, \
                 nothing to fall back), keep the files on a filesystem whose data profile has one copy \
                 (single, RAID0), or accept the fallback"
            ),
            "a single-copy profile gives up the second copy a bad sector is repaired from; the app setting \
             pays the page cache"
                .to_owned(),
        ),
        Some(Verdict::DirectBounced) => (
            "none needed: the kernel bounces O_DIRECT writes (direct, checksums kept); NOCOW would save the \
             copy"
                .to_owned(),
            format!("NOCOW saves one memory copy per write and gives up btrfs checksums ({own})"),
        ),
        Some(Verdict::Direct) => (
            "none: O_DIRECT writes are direct".to_owned(),
            if files.iter().any(|x| x.place.nocow == Some(true)) {
                format!("NOCOW: no btrfs checksums on these files ({own})")
            } else {
                "none".to_owned()
            },
        ),
        Some(Verdict::Inconclusive) | None if f.o_direct == Some(false) => (
            "none: it does not use O_DIRECT".to_owned(),
            if files.iter().any(|x| x.place.nocow == Some(true)) {
                format!("NOCOW: no btrfs checksums on these files ({own})")
            } else {
                "none".to_owned()
            },
        ),
        Some(Verdict::Inconclusive) | None
            if !files.is_empty() && files.iter().all(|x| x.path.starts_with("/dev/")) =>
        {
            (
                "none from btrfs: a block device, not a file on btrfs".to_owned(),
                "none".to_owned(),
            )
        }
        Some(Verdict::Inconclusive) | None
            if files.is_empty() || files.iter().any(|x| x.place.fs_type.is_none()) =>
        {
            (
                "run btrfs-lab apps on the system itself: where its files are was not read (see \
                 each file's note)"
                    .to_owned(),
                "none".to_owned(),
            )
        }
        Some(Verdict::Inconclusive) | None => (
            "measure first: the kernel version alone does not tell (see each file's measure)".to_owned(),
            "none".to_owned(),
        ),
    }
}

/// Keeps the applications with a file on the btrfs `fsid` (`apps MOUNT`).
pub fn only_on(report: &mut AppsReport, fsid: &str) {
    report.apps.retain(|a| {
        a.files
            .iter()
            .any(|f| f.place.fsid.as_deref() == Some(fsid))
    });
    report.falling_back = report.apps.iter().filter(|a| falls_back(a.verdict)).count();
}

/// doctor's findings about the filesystem `fsid`: one `app-dio-fallback`
/// per application whose O_DIRECT writes to files on it are expected to
/// fall back to buffered writes.
pub fn findings(report: &AppsReport, fsid: &str) -> Vec<Finding> {
    let mut out = Vec::new();
    for a in &report.apps {
        if a.o_direct == Some(false) {
            continue;
        }
        let on: Vec<&AppFile> = a
            .files
            .iter()
            .filter(|x| x.place.fsid.as_deref() == Some(fsid) && falls_back(x.expected))
            .collect();
        let Some(first) = on.first() else {
            continue;
        };
        let known = if a.o_direct == Some(true) {
            ""
        } else {
            " (if it uses O_DIRECT)"
        };
        let mut f = Finding::new(
            Code::AppDioFallback,
            format!(
                "{} {}: its O_DIRECT writes are expected to fall back to buffered writes on kernel {}{known}",
                a.kind.name(),
                a.name,
                report.kernel
            ),
            format!("{} Change: {} Trade-off: {}", cost(first.expected.unwrap_or(Verdict::BufferedFallback), false), a.change, a.tradeoff),
        )
        .with_evidence("setting", format!("{} ({})", a.setting, a.source));
        for x in &on {
            f = f.with_evidence(
                &x.path.to_string_lossy(),
                format!(
                    "{}, {}",
                    x.expected.map_or("?", Verdict::name),
                    if x.place.nocow == Some(true) {
                        "NOCOW"
                    } else {
                        "checksummed"
                    }
                ),
            );
        }
        if let Some(m) = &first.measure {
            f = f.with_command(m.split(" (its writes now)").next().unwrap_or(m).to_owned());
        }
        out.push(f);
    }
    out
}

#[cfg(test)]
mod tests;
