//! The planner: what `nocow DIR` will do, computed from what was read.
//! Pure, so every refusal and warning is unit-tested without root.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::audit::{Entry, EntryKind, EntryState, RootInfo};
use crate::error::{Error, ErrorKind, Result};
use crate::model::profile::Profile;
use crate::model::profile::profile_list;
use crate::parse::size::format_iec;
use crate::sys::block::loopdev::FileIdentity;
use crate::sys::proc::procs::{self, Opener};

/// Free space kept beyond the largest copy: metadata of the copy, and the
/// estimate btrfs gives for free space.
pub(crate) const SPACE_MARGIN: u64 = 64 << 20;

/// What the user asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    /// The directory, as given.
    pub dir: PathBuf,
    /// Copy existing files into NOCOW files.
    pub migrate: bool,
    /// Create the directory as a subvolume.
    pub subvolume: bool,
    /// Migrate files even when a process has them open.
    pub force: bool,
    /// Only show the plan: a file a process has open is marked, not refused.
    pub dry_run: bool,
}

/// The directory as found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// It does not exist; `missing` are the directories to create, outermost
    /// first (the last one is the directory itself).
    Missing {
        /// Absolute paths to create.
        missing: Vec<PathBuf>,
    },
    /// It exists (and is a directory).
    Existing,
}

/// Everything the planner decides from.
#[derive(Debug, Clone)]
pub struct Observed {
    /// The directory, or its nearest existing ancestor when it is missing.
    pub root: RootInfo,
    /// Missing or existing.
    pub target: Target,
    /// The files and directories below it (empty when missing).
    pub entries: Vec<Entry>,
    /// Running as root.
    pub(crate) as_root: bool,
    /// The effective user id (without root, only own files keep their owner).
    pub(crate) euid: u32,
    /// The identity of the existing directory (walked by descriptor).
    pub(crate) root_id: Option<FileIdentity>,
    /// The existing directory, held open since it was walked: the plan is
    /// carried out from it.
    pub root_dir: Option<std::sync::Arc<super::scan::DirHandle>>,
}

/// One step of the plan.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(tag = "action", rename_all = "kebab-case")]
pub enum Step {
    /// mkdir.
    CreateDirectory {
        /// Absolute path.
        #[serde(serialize_with = "crate::report::text::lossy_path")]
        path: PathBuf,
    },
    /// A new subvolume (the directory itself).
    CreateSubvolume {
        /// Absolute path.
        #[serde(serialize_with = "crate::report::text::lossy_path")]
        path: PathBuf,
    },
    /// FS_IOC_SETFLAGS with NOCOW on a directory, read back.
    SetNocow {
        /// Absolute path.
        #[serde(serialize_with = "crate::report::text::lossy_path")]
        path: PathBuf,
        /// Drop a compression attribute it inherited (only on directories
        /// btrfs-lab creates).
        #[serde(skip)]
        clear_compression: bool,
        /// Its identity when planned (none for a directory the plan creates).
        #[serde(skip)]
        id: Option<FileIdentity>,
    },
    /// Removes a temporary file an interrupted migration left.
    RemoveLeftover {
        /// Absolute path.
        #[serde(serialize_with = "crate::report::text::lossy_path")]
        path: PathBuf,
        /// Its identity when planned.
        #[serde(skip)]
        id: FileIdentity,
        /// The identity of its directory when planned.
        #[serde(skip)]
        dir_id: FileIdentity,
    },
    /// Removes btrfs-lab's marker attribute from a migrated file (an
    /// interruption right after its rename left it).
    ClearMarker {
        /// Absolute path.
        #[serde(serialize_with = "crate::report::text::lossy_path")]
        path: PathBuf,
        /// Its identity when planned.
        #[serde(skip)]
        id: FileIdentity,
        /// The identity of its directory when planned.
        #[serde(skip)]
        dir_id: FileIdentity,
    },
    /// Sets NOCOW on an empty file in place.
    SwitchEmpty {
        /// Absolute path.
        #[serde(serialize_with = "crate::report::text::lossy_path")]
        path: PathBuf,
        /// Its identity when planned.
        #[serde(skip)]
        id: FileIdentity,
        /// The identity of its directory when planned.
        #[serde(skip)]
        dir_id: FileIdentity,
    },
    /// Copies a file into a new NOCOW file and renames that over it.
    Migrate {
        /// Absolute path.
        #[serde(serialize_with = "crate::report::text::lossy_path")]
        path: PathBuf,
        /// Its size.
        size_bytes: u64,
        /// Its allocation (the copy allocates about as much).
        allocated_bytes: u64,
        /// Processes that had it open when planned (a dry run shows them; a
        /// real run refuses the file unless --force).
        open_by: Vec<Opener>,
        /// Its identity when planned.
        #[serde(skip)]
        id: FileIdentity,
        /// The identity of its directory when planned.
        #[serde(skip)]
        dir_id: FileIdentity,
    },
}

impl Step {
    /// One line for the text plan.
    pub fn describe(&self) -> String {
        match self {
            Step::CreateDirectory { path } => format!("create directory {}", path.display()),
            Step::CreateSubvolume { path } => format!("create subvolume {}", path.display()),
            Step::SetNocow { path, .. } => format!(
                "set NOCOW on directory {} (FS_IOC_SETFLAGS) and read it back",
                path.display()
            ),
            Step::RemoveLeftover { path, .. } => format!(
                "remove {} (left by an interrupted migration)",
                path.display()
            ),
            Step::ClearMarker { path, .. } => format!(
                "remove btrfs-lab's marker attribute from {} (an interrupted migration)",
                path.display()
            ),
            Step::SwitchEmpty { path, .. } => {
                format!("set NOCOW on empty file {}", path.display())
            }
            Step::Migrate {
                path,
                size_bytes,
                allocated_bytes,
                open_by,
                ..
            } => {
                let size = if allocated_bytes < size_bytes {
                    format!(
                        "{}, sparse: {} of data",
                        format_iec(*size_bytes),
                        format_iec(*allocated_bytes)
                    )
                } else {
                    format_iec(*size_bytes)
                };
                let mut line = format!(
                    "copy {} ({size}) into a new NOCOW file, verify it, rename it over the original",
                    path.display(),
                );
                if !open_by.is_empty() {
                    line.push_str(&format!(
                        " [open by {}: will be refused at run time unless --include-open]",
                        procs::describe(open_by)
                    ));
                }
                line
            }
        }
    }
}

/// A file that is not NOCOW and will stay so.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Staying {
    /// Absolute path.
    #[serde(serialize_with = "crate::report::text::lossy_path")]
    pub path: PathBuf,
    /// The exact bytes of `path` (an array of 0-255), present only when
    /// they are not UTF-8 (`path` then shows U+FFFD in their place).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path_bytes: Option<Vec<u8>>,
    /// As shown.
    #[serde(skip)]
    pub display: String,
    /// Its size.
    pub size_bytes: u64,
    /// Its audit state.
    pub state: EntryState,
    /// Why it stays.
    pub reason: String,
}

/// The plan.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Plan {
    /// Steps in order; empty when there is nothing to do.
    pub steps: Vec<Step>,
    /// Files that are not NOCOW and will stay so after the plan.
    pub staying: Vec<Staying>,
    /// Free space the migration needs at once: the copies of the largest
    /// files migrated at once, plus a margin; 0 without migration.
    pub space_needed_bytes: u64,
    /// Files migrated at once (each on a thread of its own): up to
    /// [`PARALLEL_MIGRATIONS`], fewer when the free space holds fewer
    /// copies of the largest files; 0 without migration.
    pub parallel_migrations: u32,
    /// Free space available.
    pub space_available_bytes: u64,
    /// What the user must know before saying yes.
    pub warnings: Vec<String>,
    /// Why nothing is done (not btrfs); null otherwise.
    pub nothing_to_do: Option<String>,
}

/// The warning every NOCOW set-up carries.
pub(crate) const NO_CHECKSUMS: &str = "NOCOW files have no data checksums and are never compressed: \
btrfs cannot detect corruption in them (scrub skips them) nor repair them from another copy.";

/// Plans `nocow DIR` (with `--migrate`, `--subvolume`, `--force`).
pub fn plan(req: &Request, obs: &Observed) -> Result<Plan> {
    let root = &obs.root;
    let mut plan = Plan {
        steps: Vec::new(),
        staying: Vec::new(),
        space_needed_bytes: 0,
        parallel_migrations: 0,
        space_available_bytes: root.available_bytes,
        warnings: Vec::new(),
        nothing_to_do: None,
    };
    if !root.is_btrfs() {
        plan.nothing_to_do = Some(format!(
            "{} is on {}, not btrfs: {} does not copy on write, so NOCOW does not apply and nothing was changed",
            req.dir.display(),
            root.fs_type,
            root.fs_type
        ));
        return Ok(plan);
    }
    if root.read_only {
        return Err(Error::new(
            ErrorKind::ReadOnly,
            format!(
                "{} is on a read-only filesystem (mounted at {}); nothing was changed",
                req.dir.display(),
                root.mount_point.display()
            ),
        )
        .with_hint("remount it read-write (mount -o remount,rw) and run again"));
    }

    match &obs.target {
        Target::Missing { missing } => {
            let (last, parents) = missing
                .split_last()
                .ok_or_else(|| Error::new(ErrorKind::State, "nothing to create"))?;
            for p in parents {
                plan.steps.push(Step::CreateDirectory { path: p.clone() });
            }
            plan.steps.push(if req.subvolume {
                Step::CreateSubvolume { path: last.clone() }
            } else {
                Step::CreateDirectory { path: last.clone() }
            });
            plan.steps.push(Step::SetNocow {
                path: last.clone(),
                clear_compression: true,
                id: None,
            });
        }
        Target::Existing => {
            if root.compression_attr == Some(true) {
                return Err(crate::sys::fs::filesystem::compression_conflict(
                    &root.dir,
                    root.compression_property.is_some(),
                ));
            }
            if req.subvolume && !root.subvolume {
                return Err(Error::new(
                    ErrorKind::WrongTarget,
                    format!(
                        "{} exists and is a plain directory, not a subvolume",
                        root.dir.display()
                    ),
                )
                .with_hint(
                    "give --subvolume a path that does not exist yet, then move the files there \
                     with --migrate (or drop --subvolume)",
                ));
            }
            if root.nocow != Some(true) {
                plan.steps.push(Step::SetNocow {
                    path: root.dir.clone(),
                    clear_compression: false,
                    id: obs.root_id,
                });
            }
            plan_contents(req, obs, &mut plan)?;
        }
    }
    plan.warnings = warnings(req, obs, &plan);
    Ok(plan)
}

fn plan_contents(req: &Request, obs: &Observed, plan: &mut Plan) -> Result<()> {
    let mut leftovers = Vec::new();
    let mut markers = Vec::new();
    let mut switch = Vec::new();
    let mut migrate = Vec::new();
    let mut busy = Vec::new();
    for e in &obs.entries {
        // Leftovers of an interrupted migration are cleaned by the next one.
        if e.state == EntryState::Leftover {
            if req.migrate {
                leftovers.push(Step::RemoveLeftover {
                    path: e.path.clone(),
                    id: e.id,
                    dir_id: e.dir_id,
                });
            }
            continue;
        }
        if e.marker && req.migrate {
            markers.push(Step::ClearMarker {
                path: e.path.clone(),
                id: e.id,
                dir_id: e.dir_id,
            });
        }
        let stay = |reason: String| Staying {
            path: e.path.clone(),
            path_bytes: e.path_bytes.clone(),
            display: e.display.clone(),
            size_bytes: e.size_bytes,
            state: e.state,
            reason,
        };
        match (e.kind, e.state) {
            (EntryKind::Directory, EntryState::Compressed) if req.migrate => {
                return Err(crate::sys::fs::filesystem::compression_conflict(
                    &e.path,
                    e.compression_property.is_some(),
                ));
            }
            (EntryKind::Directory, EntryState::NotNocow) if req.migrate => {
                plan.steps.push(Step::SetNocow {
                    path: e.path.clone(),
                    clear_compression: false,
                    id: Some(e.id),
                });
            }
            (EntryKind::File, EntryState::Switchable) if req.migrate => {
                switch.push(Step::SwitchEmpty {
                    path: e.path.clone(),
                    id: e.id,
                    dir_id: e.dir_id,
                });
            }
            (EntryKind::File, EntryState::NeedsMigration)
                if req.migrate && !obs.as_root && e.uid != obs.euid =>
            {
                plan.staying.push(stay(format!(
                    "owned by uid {}: only root can give the copy its owner",
                    e.uid
                )));
            }
            (EntryKind::File, EntryState::NeedsMigration) if req.migrate => {
                if !e.open_by.is_empty() && !req.force {
                    busy.push(e);
                }
                migrate.push(Step::Migrate {
                    path: e.path.clone(),
                    size_bytes: e.size_bytes,
                    allocated_bytes: e.allocated_bytes,
                    // With --force the warnings say it instead.
                    open_by: if req.force {
                        Vec::new()
                    } else {
                        e.open_by.clone()
                    },
                    id: e.id,
                    dir_id: e.dir_id,
                });
            }
            (EntryKind::File, EntryState::Switchable) => plan.staying.push(stay(
                "empty: --migrate sets NOCOW on it in place".to_owned(),
            )),
            (EntryKind::File, EntryState::NeedsMigration) => plan.staying.push(stay(
                "holds data, so the flag would be ignored: --migrate copies it into a NOCOW file"
                    .to_owned(),
            )),
            (EntryKind::File, EntryState::Blocked) => {
                plan.staying
                    .push(stay(e.reason.clone().unwrap_or_else(|| "blocked".into())));
            }
            _ => {}
        }
    }
    if !busy.is_empty() && !req.dry_run {
        let list: Vec<String> = busy
            .iter()
            .map(|e| format!("{} by {}", e.display, procs::describe(&e.open_by)))
            .collect();
        return Err(Error::new(
            ErrorKind::Busy,
            format!(
                "{} open by a running process, so a copy could miss its writes: {}; nothing was changed",
                if busy.len() == 1 { "a file is" } else { "files are" },
                list.join("; ")
            ),
        )
        .with_hint(
            "stop the process (shut the VM down, stop the database) and run again; --include-open migrates \
             anyway, and writes the process makes after the copy are lost",
        ));
    }
    if !migrate.is_empty() {
        let (parallel, needed) = parallel_migrations(&migrate, plan.space_available_bytes);
        plan.parallel_migrations = parallel;
        plan.space_needed_bytes = needed;
        if plan.space_available_bytes < plan.space_needed_bytes {
            return Err(Error::new(
                ErrorKind::NoSpace,
                format!(
                    "not enough free space in {}: migrating needs room for one copy of the largest file, {} with a margin, and {} is free; nothing was changed",
                    obs.root.dir.display(),
                    format_iec(plan.space_needed_bytes),
                    format_iec(plan.space_available_bytes)
                ),
            )
            .with_hint("free some space and run again"));
        }
    }
    plan.steps.extend(leftovers);
    plan.steps.extend(markers);
    plan.steps.extend(switch);
    plan.steps.extend(migrate);
    Ok(())
}

/// Files migrated at once at most. A file's migration mostly waits: on
/// the disk (reading the original, flushing the copy, reading it back) and
/// then, for [`super::migrate`]'s grace, with the swapped-out original
/// under its lease. Many at a time overlap those waits with each other's
/// work; that is what keeps a run of many small files as fast as copying
/// them by hand (`scripts/bench-nocow.sh`: 200 files of 4 MiB, 8 at once
/// 1.3×, 16 at once 1.0× the time of `cp` + `sync` + `cmp`).
pub const PARALLEL_MIGRATIONS: u32 = 16;

/// The most room the copies being made at once may take beyond the
/// largest file's copy: small files go many at a time, large ones a few
/// (two of the largest size at most, so a 1 TiB file never waits for room
/// for 16 of its size).
const PARALLEL_BYTES: u64 = 256 << 20;

/// How many of `migrate`'s files are migrated at once, and the free space
/// that needs: the copies of the largest that many files plus
/// [`SPACE_MARGIN`]. As many as [`PARALLEL_MIGRATIONS`] (no more than
/// there are files) whose copies together take no more than twice the
/// largest one or [`PARALLEL_BYTES`], fewer when the free space holds
/// fewer, at least one (whose space need the caller checks).
fn parallel_migrations(migrate: &[Step], available: u64) -> (u32, u64) {
    let mut sizes: Vec<u64> = migrate
        .iter()
        .filter_map(|s| match s {
            Step::Migrate {
                allocated_bytes, ..
            } => Some(*allocated_bytes),
            _ => None,
        })
        .collect();
    sizes.sort_unstable_by(|a, b| b.cmp(a));
    let largest = sizes.first().copied().unwrap_or(0);
    let cap = largest.saturating_mul(2).max(PARALLEL_BYTES);
    let copies = |n: usize| sizes.iter().take(n).sum::<u64>();
    let most = sizes.len().clamp(1, PARALLEL_MIGRATIONS as usize);
    let n = (1..=most)
        .rev()
        .find(|&n| copies(n) <= cap && copies(n) + SPACE_MARGIN <= available)
        .unwrap_or(1);
    (u32::try_from(n).unwrap_or(1), copies(n) + SPACE_MARGIN)
}

fn warnings(req: &Request, obs: &Observed, plan: &Plan) -> Vec<String> {
    let mut w = vec![NO_CHECKSUMS.to_owned()];
    let new_subvolume = plan
        .steps
        .iter()
        .any(|s| matches!(s, Step::CreateSubvolume { .. }));
    if new_subvolume || (req.subvolume && obs.root.subvolume) {
        w.push(
            "The directory is a subvolume of its own: snapshots of the parent subvolume stop at its \
             boundary, so they neither include these files nor make the next write to each of their \
             blocks copy-on-write again. Snapshots of this subvolume itself still do."
                .to_owned(),
        );
    } else {
        w.push(
            "Snapshots still copy-on-write NOCOW files once: after a snapshot of the subvolume that \
             holds them, the first write to each block is copied, which fragments them again. \
             --subvolume on a new directory keeps them out of the parent's snapshots."
                .to_owned(),
        );
    }
    let dup: Vec<Profile> = obs.root.duplicating_profiles();
    if !dup.is_empty() {
        w.push(format!(
            "The data profile is {}: on profiles that keep several copies (DUP, RAID1, RAID1C3/4, \
             RAID10, RAID5/6) kernels from 6.18 (and 6.12.117) to 7.2 turn O_DIRECT writes buffered \
             even for NOCOW files, and 7.3 copies them through a bounce buffer, so NOCOW does not \
             make databases and VMs using O_DIRECT direct here (btrfs-lab probe-dio {} measures \
             what this kernel does).",
            profile_list(&dup),
            req.dir.display()
        ));
    }
    for o in &obs.root.mount_options {
        if o == "nodatacow" || o == "nodatasum" {
            w.push(format!(
                "The filesystem is mounted with {o}: files created anywhere on it already have no \
                 data checksums."
            ));
        }
    }
    if req.migrate && req.force {
        for e in obs.entries.iter().filter(|e| {
            !e.open_by.is_empty()
                && e.kind == EntryKind::File
                && e.state == EntryState::NeedsMigration
        }) {
            w.push(format!(
                "--include-open: {} is open by {}; what it writes after the copy goes to the replaced file \
                 and is lost.",
                e.display,
                procs::describe(&e.open_by)
            ));
        }
    }
    if req.migrate && !obs.as_root && plan.steps.iter().any(|s| matches!(s, Step::Migrate { .. })) {
        w.push(
            "Not running as root: trusted.* attributes are invisible to this user and would not be \
             copied, files owned by someone else are left as they are, and files other users' \
             processes have open cannot be seen."
                .to_owned(),
        );
    }
    w
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nocow::audit::Facts;
    use crate::nocow::audit::classify;
    use crate::sys::kernel::ioctl::{FS_COMPR_FL, FS_NOCOW_FL, IFlags};

    fn root(fs: &str) -> RootInfo {
        RootInfo {
            path: PathBuf::from("d"),
            dir: PathBuf::from("/m/d"),
            is_dir: true,
            fs_type: fs.to_owned(),
            mount_point: PathBuf::from("/m"),
            source: "/dev/x".into(),
            read_only: false,
            data_profiles: vec![Profile::Single],
            mount_options: Vec::new(),
            nocow: Some(false),
            compression_attr: Some(false),
            compression_property: None,
            subvolume: false,
            available_bytes: 10 << 30,
            note: None,
        }
    }

    fn file(name: &str, flags: IFlags, size: u64, alloc: u64) -> Entry {
        let facts = Facts {
            kind: EntryKind::File,
            flags,
            size_bytes: size,
            links: 1,
            temp_name: name.starts_with(crate::nocow::TEMP_PREFIX),
            marker: name.starts_with(crate::nocow::TEMP_PREFIX),
        };
        let (state, reason) = classify(&facts);
        Entry {
            path: PathBuf::from("/m/d").join(name),
            path_bytes: None,
            display: format!("d/{name}"),
            kind: EntryKind::File,
            state,
            nocow: flags.intersects(FS_NOCOW_FL),
            compression_attr: false,
            compression_property: None,
            size_bytes: size,
            allocated_bytes: alloc,
            sparse: false,
            links: 1,
            uid: 0,
            gid: 0,
            mode: 0o644,
            open_by: Vec::new(),
            reason,
            marker: facts.marker,
            id: FileIdentity { dev: 1, ino: size },
            dir_id: FileIdentity { dev: 1, ino: 256 },
            flags,
        }
    }

    fn req(migrate: bool) -> Request {
        Request {
            dir: PathBuf::from("d"),
            migrate,
            subvolume: false,
            force: false,
            dry_run: false,
        }
    }

    fn existing(entries: Vec<Entry>) -> Observed {
        Observed {
            root: root("btrfs"),
            target: Target::Existing,
            entries,
            as_root: true,
            euid: 0,
            root_id: None,
            root_dir: None,
        }
    }

    fn actions(p: &Plan) -> Vec<&'static str> {
        p.steps
            .iter()
            .map(|s| match s {
                Step::CreateDirectory { .. } => "mkdir",
                Step::CreateSubvolume { .. } => "subvol",
                Step::SetNocow { .. } => "nocow",
                Step::RemoveLeftover { .. } => "leftover",
                Step::ClearMarker { .. } => "marker",
                Step::SwitchEmpty { .. } => "switch",
                Step::Migrate { .. } => "migrate",
            })
            .collect()
    }

    #[test]
    fn missing_directory_is_created_then_flagged() {
        let obs = Observed {
            root: root("btrfs"),
            target: Target::Missing {
                missing: vec![PathBuf::from("/m/a"), PathBuf::from("/m/a/b")],
            },
            entries: Vec::new(),
            as_root: true,
            euid: 0,
            root_id: None,
            root_dir: None,
        };
        let p = plan(&req(false), &obs).unwrap();
        assert_eq!(actions(&p), ["mkdir", "mkdir", "nocow"]);
        assert!(p.warnings[0].contains("no data checksums"));
        assert!(p.warnings[1].contains("Snapshots still copy-on-write"));
        let mut r = req(false);
        r.subvolume = true;
        let p = plan(&r, &obs).unwrap();
        assert_eq!(actions(&p), ["mkdir", "subvol", "nocow"]);
        assert!(p.warnings[1].contains("subvolume of its own"));
    }

    #[test]
    fn files_stay_without_migrate_and_move_with_it() {
        let entries = vec![
            file("a.img", IFlags::empty(), 100 << 20, 1 << 20),
            file("b", IFlags::empty(), 0, 0),
            file("c", FS_NOCOW_FL, 5, 5),
            file(".btrfs-lab-nocow-1-x", FS_NOCOW_FL, 5, 5),
        ];
        let p = plan(&req(false), &existing(entries.clone())).unwrap();
        assert_eq!(actions(&p), ["nocow"]);
        assert_eq!(p.staying.len(), 2);
        assert_eq!(p.space_needed_bytes, 0);
        let p = plan(&req(true), &existing(entries)).unwrap();
        assert_eq!(actions(&p), ["nocow", "leftover", "switch", "migrate"]);
        assert!(p.staying.is_empty());
        assert_eq!(p.space_needed_bytes, (1 << 20) + SPACE_MARGIN);
        assert_eq!(p.parallel_migrations, 1);
    }

    fn migrations(allocated: &[u64]) -> Vec<Step> {
        allocated
            .iter()
            .enumerate()
            .map(|(i, &a)| Step::Migrate {
                path: PathBuf::from(format!("/m/f{i}")),
                size_bytes: a,
                allocated_bytes: a,
                open_by: Vec::new(),
                id: FileIdentity {
                    dev: 1,
                    ino: i as u64 + 10,
                },
                dir_id: FileIdentity { dev: 1, ino: 2 },
            })
            .collect()
    }

    #[test]
    fn a_sparse_file_counts_its_data_not_its_holes() {
        const M: u64 = 1 << 20;
        let mut steps = migrations(&[4 * M, 2 * M]);
        if let Step::Migrate {
            size_bytes,
            allocated_bytes,
            ..
        } = &mut steps[0]
        {
            (*size_bytes, *allocated_bytes) = (64 * M, M);
        }
        assert_eq!(
            steps[0].describe(),
            "copy /m/f0 (64.00MiB, sparse: 1.00MiB of data) into a new NOCOW file, verify it, rename it over the original"
        );
        assert!(steps[1].describe().starts_with("copy /m/f1 (2.00MiB) into"));
        let plan = Plan {
            steps,
            staying: Vec::new(),
            space_needed_bytes: 0,
            parallel_migrations: 1,
            space_available_bytes: 0,
            warnings: Vec::new(),
            nothing_to_do: None,
        };
        // What progress counts: the bytes of data, not the holes.
        assert_eq!(crate::nocow::files_total(&plan), 3 * M);
    }

    #[test]
    fn many_small_files_go_at_once_large_ones_a_few_and_only_where_they_fit() {
        const M: u64 = 1 << 20;
        const G: u64 = 1 << 30;
        // 200 × 4 MiB: 16 at once, room for 16 copies.
        let many = migrations(&[4 * M; 200]);
        assert_eq!(
            parallel_migrations(&many, 100 * G),
            (PARALLEL_MIGRATIONS, 64 * M + SPACE_MARGIN)
        );
        // Not more than there are files.
        assert_eq!(
            parallel_migrations(&many[..3], 100 * G),
            (3, 12 * M + SPACE_MARGIN)
        );
        // 2 × 1 GiB: both (twice the largest); 5 × 1 GiB: still two.
        assert_eq!(
            parallel_migrations(&migrations(&[G, G]), 100 * G),
            (2, 2 * G + SPACE_MARGIN)
        );
        assert_eq!(parallel_migrations(&migrations(&[G; 5]), 100 * G).0, 2);
        // 100 MiB files: 256 MiB together at most, so two.
        assert_eq!(
            parallel_migrations(&migrations(&[100 * M; 10]), 100 * G),
            (2, 200 * M + SPACE_MARGIN)
        );
        // Only as many as the free space holds: one when it holds one.
        assert_eq!(
            parallel_migrations(&migrations(&[G, G]), G + SPACE_MARGIN),
            (1, G + SPACE_MARGIN)
        );
        assert_eq!(
            parallel_migrations(&many, 20 * M + SPACE_MARGIN),
            (5, 20 * M + SPACE_MARGIN)
        );
        // Not even one: one, with its need (the caller refuses).
        assert_eq!(
            parallel_migrations(&migrations(&[G]), M),
            (1, G + SPACE_MARGIN)
        );
    }

    #[test]
    fn refusals_change_nothing() {
        let mut obs = existing(vec![file("a", IFlags::empty(), 10, 10)]);
        obs.root.compression_attr = Some(true);
        let e = plan(&req(false), &obs).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::WrongTarget);
        assert!(e.message().contains("compression attribute"));

        let mut obs = existing(vec![file("a", IFlags::empty(), 10, 10)]);
        obs.root.read_only = true;
        assert_eq!(
            plan(&req(false), &obs).unwrap_err().kind(),
            ErrorKind::ReadOnly
        );

        let mut obs = existing(vec![file("a", IFlags::empty(), 10, 10)]);
        obs.entries[0].open_by.push(Opener {
            pid: 42,
            command: "qemu".into(),
            how: "fd".to_owned(),
        });
        let e = plan(&req(true), &obs).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Busy);
        assert!(e.message().contains("pid 42 (qemu)"), "{}", e.message());
        let mut dry = req(true);
        dry.dry_run = true;
        let p = plan(&dry, &obs).unwrap();
        assert_eq!(actions(&p), ["nocow", "migrate"]);
        assert!(
            p.steps[1]
                .describe()
                .contains("open by pid 42 (qemu): will be refused at run time"),
            "{}",
            p.steps[1].describe()
        );
        let mut forced = req(true);
        forced.force = true;
        let p = plan(&forced, &obs).unwrap();
        assert!(p.warnings.iter().any(|w| w.contains("--include-open")));
        assert!(!p.steps[1].describe().contains("refused at run time"));

        let mut obs = existing(vec![file("a", IFlags::empty(), 10 << 30, 10 << 30)]);
        obs.root.available_bytes = 10 << 30;
        assert_eq!(
            plan(&req(true), &obs).unwrap_err().kind(),
            ErrorKind::NoSpace
        );
        // Without --migrate no space is needed.
        assert!(plan(&req(false), &obs).is_ok());

        let mut sub = req(false);
        sub.subvolume = true;
        assert_eq!(
            plan(&sub, &existing(Vec::new())).unwrap_err().kind(),
            ErrorKind::WrongTarget
        );
    }

    #[test]
    fn without_root_other_users_files_stay() {
        let mut mine = file("mine", IFlags::empty(), 10, 10);
        mine.uid = 1000;
        let theirs = file("theirs", IFlags::empty(), 20, 20);
        let mut obs = existing(vec![mine, theirs]);
        obs.as_root = false;
        obs.euid = 1000;
        let p = plan(&req(true), &obs).unwrap();
        assert_eq!(actions(&p), ["nocow", "migrate"]);
        assert_eq!(p.staying.len(), 1);
        assert!(p.staying[0].reason.contains("uid 0"));
        assert!(p.warnings.iter().any(|w| w.contains("Not running as root")));
    }

    #[test]
    fn compressed_subdirectory_blocks_migration_only() {
        let mut d = file("sub", FS_COMPR_FL, 0, 0);
        d.kind = EntryKind::Directory;
        d.state = EntryState::Compressed;
        let obs = existing(vec![d]);
        assert!(plan(&req(false), &obs).is_ok());
        assert_eq!(
            plan(&req(true), &obs).unwrap_err().kind(),
            ErrorKind::WrongTarget
        );
    }

    #[test]
    fn not_btrfs_is_nothing_to_do_and_profiles_warn() {
        let obs = Observed {
            root: root("ext4"),
            target: Target::Existing,
            entries: Vec::new(),
            as_root: true,
            euid: 0,
            root_id: None,
            root_dir: None,
        };
        let p = plan(&req(true), &obs).unwrap();
        assert!(p.steps.is_empty());
        assert!(p.nothing_to_do.unwrap().contains("not btrfs"));

        let mut obs = existing(Vec::new());
        obs.root.data_profiles = vec![Profile::Raid1];
        let p = plan(&req(false), &obs).unwrap();
        assert!(p.warnings.iter().any(|w| w.contains("raid1")));
        obs.root.data_profiles = vec![Profile::Raid0];
        let p = plan(&req(false), &obs).unwrap();
        assert!(!p.warnings.iter().any(|w| w.contains("O_DIRECT")));
    }
}
