//! `nocow`: NOCOW directories for VM images and databases, an audit of which
//! files really are NOCOW, and a migration of existing files that loses
//! nothing when interrupted.
//!
//! The NOCOW flag (`chattr +C`) is ignored on a file that already holds
//! data, is inherited only by files created afterwards, excludes the
//! compression attribute, and gives up data checksums. [`scan`] reads what
//! is there, [`audit`] and [`plan`] decide (pure), [`migrate`] carries the
//! plan out and this module ties them together and verifies the result.

pub mod advice;
pub mod audit;
pub mod migrate;
pub mod operation;
pub mod plan;
pub mod scan;

use std::fs;
use std::path::{Component, Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::{Error, ErrorKind, Result};
use crate::sys::block::loopdev::FileIdentity;
use crate::sys::fs::beneath::HeldDir;
use crate::sys::fs::root::SysRoot;
use crate::sys::{fs::beneath, fs::filesystem, kernel::btrfs, kernel::signals};
use advice::Advice;
use audit::{Entry, EntryKind, EntryState, RootInfo, Summary, summarize};
use migrate::{ExecOptions, Migrated};
use plan::{Observed, Plan, Request, Staying, Step, Target};
use std::os::fd::AsFd;

/// Names of btrfs-lab's temporary copies start with this.
pub const TEMP_PREFIX: &str = ".btrfs-lab-nocow-";
/// The extended attribute that marks a temporary copy as btrfs-lab's own.
pub const MARKER_XATTR: &str = "user.btrfs-lab.nocow-temp";

/// `nocow --check --json`: the audit, and the advice when `--for` was
/// given.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct CheckDocument {
    /// The audit.
    #[serde(flatten)]
    pub check: CheckReport,
    /// What to do for the service named with `--for`.
    pub advice: Option<advice::Advice>,
}

/// The `nocow --check` report.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct CheckReport {
    /// Each path given, and its filesystem.
    pub roots: Vec<RootInfo>,
    /// Every file and directory found, in path order.
    pub entries: Vec<Entry>,
    /// Counts and bytes.
    pub summary: Summary,
    /// What was not looked at, and why.
    pub skipped: Vec<String>,
    /// Things to know (not btrfs, processes that could not be inspected).
    pub notes: Vec<String>,
}

/// Audits `paths` recursively; changes nothing.
pub fn check(sysroot: &SysRoot, paths: &[PathBuf]) -> Result<CheckReport> {
    let mut report = CheckReport {
        roots: Vec::new(),
        entries: Vec::new(),
        summary: Summary::default(),
        skipped: Vec::new(),
        notes: Vec::new(),
    };
    let mut unreadable = 0;
    for p in paths {
        let s = scan::scan(sysroot, p)?;
        report.notes.extend(s.root.note.clone());
        report.roots.push(s.root);
        report.entries.extend(s.entries);
        report.skipped.extend(s.skipped);
        unreadable = unreadable.max(s.unreadable_processes);
    }
    if unreadable > 0 {
        report.notes.push(format!(
            "the open files of {unreadable} processes could not be inspected (not root)"
        ));
    }
    report.summary = summarize(&report.entries);
    Ok(report)
}

/// Looks at the directory of a `nocow DIR` request (or, when it is
/// missing, at its nearest existing ancestor). The directory is opened once
/// ([`scan::hold`]): a symbolic link another user planted on the way is
/// refused here, before anything is planned or done, and everything after
/// goes through the descriptor held in [`Observed::root_dir`].
pub fn observe(sysroot: &SysRoot, req: &Request) -> Result<Observed> {
    let abs = std::path::absolute(&req.dir)
        .map_err(|e| Error::from_io(&e, "cannot resolve", &req.dir))?;
    match scan::hold(&req.dir) {
        Ok(held @ scan::Held::Dir(_)) => {
            let s = scan::scan_held(sysroot, &req.dir, held)?;
            Ok(Observed {
                root: s.root,
                target: Target::Existing,
                entries: s.entries,
                as_root: crate::sys::is_root(),
                euid: crate::sys::kernel::measure::ids::effective_uid(),
                root_id: s.root_dir.as_ref().map(|d| d.id),
                root_dir: s.root_dir,
            })
        }
        Ok(scan::Held::File { .. }) => Err(Error::new(
            ErrorKind::WrongTarget,
            format!("{} exists and is not a directory", req.dir.display()),
        )
        .with_hint("give a directory (it is created if it does not exist)")),
        Err(e) if e.kind() == ErrorKind::NotFound && req.migrate => Err(Error::new(
            ErrorKind::NotFound,
            format!(
                "{} does not exist: --migrate moves the files of an existing directory",
                req.dir.display()
            ),
        )
        .with_hint("check the path; to create a new NOCOW directory, leave out --migrate")),
        Err(e) if e.kind() == ErrorKind::NotFound => {
            let (ancestor, rest) = existing_ancestor(&abs)?;
            let held = scan::Held::Dir(HeldDir::open(&ancestor)?);
            let mut root = scan::inspect_held(sysroot, &ancestor, &held)?;
            let handle = match (&held, root.is_btrfs()) {
                (scan::Held::Dir(d), true) => Some(std::sync::Arc::new(scan::DirHandle {
                    file: d.file()?,
                    id: d.identity()?,
                })),
                _ => None,
            };
            root.path = req.dir.clone();
            let mut missing = Vec::new();
            let mut p = root.dir.clone();
            for c in rest {
                p.push(c);
                missing.push(p.clone());
            }
            Ok(Observed {
                root,
                target: Target::Missing { missing },
                entries: Vec::new(),
                as_root: crate::sys::is_root(),
                euid: crate::sys::kernel::measure::ids::effective_uid(),
                root_id: handle.as_ref().map(|d| d.id),
                root_dir: handle,
            })
        }
        Err(e) => Err(e),
    }
}

/// The nearest ancestor of `abs` that exists, and the names below it.
fn existing_ancestor(abs: &Path) -> Result<(PathBuf, Vec<PathBuf>)> {
    let mut rest = Vec::new();
    let mut cur = abs.to_path_buf();
    loop {
        if fs::symlink_metadata(&cur).is_ok() {
            rest.reverse();
            return Ok((cur, rest));
        }
        match cur.components().next_back() {
            Some(Component::Normal(n)) => rest.push(PathBuf::from(n)),
            _ => {
                return Err(Error::usage(format!(
                    "{} cannot be created: use a path without '..'",
                    abs.display()
                )));
            }
        }
        if !cur.pop() {
            return Err(Error::new(
                ErrorKind::NotFound,
                format!("no part of {} exists", abs.display()),
            ));
        }
    }
}

/// What `nocow DIR` did.
#[derive(Debug, Clone, Default, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Outcome {
    /// Directories created (the subvolume included).
    #[serde(serialize_with = "crate::report::text::lossy_paths")]
    pub created: Vec<PathBuf>,
    /// The subvolume created, if any.
    #[serde(serialize_with = "crate::report::text::lossy_opt_path")]
    pub subvolume: Option<PathBuf>,
    /// Directories NOCOW was set on.
    #[serde(serialize_with = "crate::report::text::lossy_paths")]
    pub nocow_set: Vec<PathBuf>,
    /// The directory carries NOCOW, read back through FS_IOC_GETFLAGS.
    pub dir_nocow: bool,
    /// Leftover temporary files removed.
    #[serde(serialize_with = "crate::report::text::lossy_paths")]
    pub removed_leftovers: Vec<PathBuf>,
    /// Files whose stale marker attribute was removed.
    #[serde(serialize_with = "crate::report::text::lossy_paths")]
    pub cleared_markers: Vec<PathBuf>,
    /// Empty files set NOCOW in place.
    #[serde(serialize_with = "crate::report::text::lossy_paths")]
    pub switched: Vec<PathBuf>,
    /// Files copied into NOCOW files.
    pub migrated: Vec<Migrated>,
    /// The audit afterwards.
    pub after: Summary,
    /// Files that are not NOCOW afterwards, and why.
    pub not_nocow: Vec<Staying>,
}

/// The `nocow DIR` report.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct NocowReport {
    /// The directory as given.
    #[serde(serialize_with = "crate::report::text::lossy_path")]
    pub path: PathBuf,
    /// The directory, absolute.
    #[serde(serialize_with = "crate::report::text::lossy_path")]
    pub dir: PathBuf,
    /// Only the plan was shown.
    pub dry_run: bool,
    /// The filesystem (of the nearest existing ancestor when the directory
    /// did not exist).
    pub filesystem: RootInfo,
    /// What was (or would be) done.
    pub plan: Plan,
    /// What was done; null for a dry run or when there was nothing to do.
    pub result: Option<Outcome>,
    /// `--for SERVICE`.
    pub advice: Option<Advice>,
}

/// The directory a plan is about.
pub fn target_dir(obs: &Observed) -> PathBuf {
    match &obs.target {
        Target::Missing { missing } => missing.last().cloned().unwrap_or_default(),
        Target::Existing => obs.root.dir.clone(),
    }
}

/// What [`execute`] tells its progress callback.
#[derive(Debug, Clone, Copy)]
pub enum Tick<'p> {
    /// A file's migration begins (its path as planned).
    File(&'p Path),
    /// Bytes copied or hashed (of [`progress_total`]).
    Bytes(u64),
}

/// The bytes of data of the files a plan migrates: what a person counts
/// (allocated, at most the size: the holes of a sparse file are not
/// copied; the progress callback's [`progress_total`] counts each byte for
/// every pass).
pub fn files_total(plan: &Plan) -> u64 {
    plan.steps
        .iter()
        .map(|s| match s {
            Step::Migrate {
                size_bytes,
                allocated_bytes,
                ..
            } => *allocated_bytes.min(size_bytes),
            _ => 0,
        })
        .sum()
}

/// How many of `steps` migrate a file.
fn files_in(steps: &[Step]) -> usize {
    steps
        .iter()
        .filter(|s| matches!(s, Step::Migrate { .. }))
        .count()
}

/// Bytes the progress callback will be told about for `plan`: the data
/// copied plus the original and the copy read back.
pub fn progress_total(plan: &Plan) -> u64 {
    plan.steps
        .iter()
        .map(|s| match s {
            Step::Migrate {
                size_bytes,
                allocated_bytes,
                ..
            } => allocated_bytes.min(size_bytes) + 2 * size_bytes,
            _ => 0,
        })
        .sum()
}

/// Carries the plan out, then verifies: the flag of `dir` (the planned
/// directory, [`target_dir`]) read back through the descriptor held since
/// the plan, and a new audit, walked from that descriptor, in which every
/// migrated file is NOCOW. `shown` is the directory as the user gave it (for
/// messages), `root` what was observed. `progress(bytes)` is called as data
/// is copied and hashed.
pub fn execute(
    sysroot: &SysRoot,
    dir: &Path,
    shown: &Path,
    root: &RootInfo,
    plan: &Plan,
    opts: &mut ExecOptions,
    progress: &mut dyn FnMut(Tick<'_>) -> Result<()>,
) -> Result<Outcome> {
    let mut out = Outcome::default();
    let total = plan.steps.len();
    opts.set_migrating(
        plan.steps
            .iter()
            .filter_map(|s| match s {
                Step::Migrate { path, id, .. } => Some((*id, path.clone())),
                _ => None,
            })
            .collect(),
    );
    let mut done = 0;
    while done < total {
        // The files to migrate come last, in a run: several at once.
        let files: Vec<&Step> = plan.steps[done..]
            .iter()
            .take_while(|s| matches!(s, Step::Migrate { .. }))
            .collect();
        let ran = if files.is_empty() {
            run_step(&plan.steps[done], opts, progress, &mut out)
                .map(|()| 1)
                .map_err(|e| (0, e))
        } else {
            let parallel = usize::try_from(plan.parallel_migrations)
                .unwrap_or(1)
                .max(1);
            migrate_files(&files, parallel, opts, progress, &mut out)
        };
        match ran {
            Ok(n) => done += n,
            Err((n, e)) if e.kind() == ErrorKind::Interrupted && files_in(&plan.steps) > 0 => {
                let moved = files_in(&plan.steps[..done]) + if files.is_empty() { 0 } else { n };
                return Err(interrupted_after(moved, files_in(&plan.steps)));
            }
            Err((n, e)) => return Err(steps_done_before(e, done + n, total)),
        }
    }
    // Verified through the descriptors held since the plan: the path is
    // never resolved again.
    let target = created_or_planned_dir(opts, dir)?;
    out.dir_nocow = filesystem::inode_flags_of(&target, shown)?
        .is_some_and(|f| f.intersects(crate::sys::kernel::ioctl::FS_NOCOW_FL));
    if !out.dir_nocow {
        return Err(Error::new(
            ErrorKind::State,
            format!("{} is not NOCOW after the change", shown.display()),
        ));
    }
    let handle = scan::DirHandle {
        id: FileIdentity::of(&target).map_err(|e| Error::from_io(&e, "cannot stat", shown))?,
        file: target,
    };
    let after = scan::rescan_dir(
        sysroot,
        &handle,
        dir,
        &shown.display().to_string(),
        root.clone(),
    )?;
    for m in &out.migrated {
        let nocow = after.entries.iter().any(|e| e.path == m.path && e.nocow);
        if !nocow {
            return Err(Error::new(
                ErrorKind::State,
                format!("{} is not NOCOW after its migration", m.path.display()),
            ));
        }
    }
    out.not_nocow = after
        .entries
        .iter()
        .filter(|e| e.kind == EntryKind::File && !e.nocow && e.state != EntryState::Leftover)
        .map(|e| Staying {
            path: e.path.clone(),
            path_bytes: e.path_bytes.clone(),
            display: e.display.clone(),
            size_bytes: e.size_bytes,
            state: e.state,
            reason: plan
                .staying
                .iter()
                .find(|s| s.path == e.path)
                .map(|s| s.reason.clone())
                .or_else(|| e.reason.clone())
                .unwrap_or_else(|| match e.state {
                    EntryState::Switchable => {
                        "empty: --migrate sets NOCOW on it in place".to_owned()
                    }
                    _ => "holds data: --migrate copies it into a NOCOW file".to_owned(),
                }),
        })
        .collect();
    out.after = summarize(&after.entries);
    Ok(out)
}

/// `e`, saying that `done` of the plan's `total` steps were done before it
/// (a re-run goes on from there); as it is when nothing was done or it was
/// an interruption.
fn steps_done_before(e: Error, done: usize, total: usize) -> Error {
    if done == 0 || e.kind() == ErrorKind::Interrupted {
        return e;
    }
    let msg = format!(
        "{} ({done} of {total} steps were done before; running the command again continues)",
        e.message()
    );
    let new = Error::new(e.kind(), msg);
    match e.hint() {
        Some(h) => new.with_hint(h),
        None => new,
    }
}

/// An interruption of a run that migrates `of` files, `moved` of them
/// moved: how many, and how to go on (a new plan finds the files left).
fn interrupted_after(moved: usize, of: usize) -> Error {
    Error::new(
        ErrorKind::Interrupted,
        format!(
            "interrupted; clean-up done: {moved} of {of} file{} moved",
            if of == 1 { "" } else { "s" }
        ),
    )
    .with_hint("run the same command again to go on: the files moved are NOCOW and skipped")
}

/// What a thread migrating files tells the one that reports.
enum Migrating {
    /// It begins the file at this index of the run.
    File(usize),
    /// Bytes copied or compared.
    Bytes(u64),
    /// It is done with the file at this index.
    Done(usize, Result<Option<Migrated>>),
}

/// Migrates `files` (Migrate steps), `parallel` at once: each thread takes
/// the next file not taken yet and carries it out alone, as
/// [`migrate::migrate_file`] does it (every file's migration is complete,
/// or leaves the original as it was). The progress callback is called on
/// this thread only. After a failure no file is begun; those under way are
/// finished. `Ok(files done)`, or the first failure with the number done.
fn migrate_files(
    files: &[&Step],
    parallel: usize,
    opts: &ExecOptions,
    progress: &mut dyn FnMut(Tick<'_>) -> Result<()>,
    out: &mut Outcome,
) -> std::result::Result<usize, (usize, Error)> {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    let next = AtomicUsize::new(0);
    let stop = AtomicBool::new(false);
    let mut done = 0;
    let mut migrated: Vec<(usize, Migrated)> = Vec::new();
    let mut failure: Option<Error> = None;
    std::thread::scope(|scope| {
        let (tx, rx) = std::sync::mpsc::channel::<Migrating>();
        for started in 0..parallel.min(files.len()) {
            let tx = tx.clone();
            let (next, stop) = (&next, &stop);
            let worker = move || {
                while !stop.load(Ordering::SeqCst) {
                    let i = next.fetch_add(1, Ordering::SeqCst);
                    let Some(Step::Migrate {
                        path, id, dir_id, ..
                    }) = files.get(i)
                    else {
                        break;
                    };
                    let _ = tx.send(Migrating::File(i));
                    let mut bytes = |n| {
                        let _ = tx.send(Migrating::Bytes(n));
                        Ok(())
                    };
                    let r = parent_dir(opts, path, *dir_id)
                        .and_then(|dir| migrate::migrate_file(dir, path, *id, opts, &mut bytes));
                    if r.is_err() {
                        stop.store(true, Ordering::SeqCst);
                    }
                    let _ = tx.send(Migrating::Done(i, r));
                }
            };
            // Fewer threads when no more can be made (a process limit);
            // none at all is a failure that changed nothing.
            if let Err(e) = std::thread::Builder::new().spawn_scoped(scope, worker) {
                if started == 0 {
                    failure = Some(Error::new(
                        ErrorKind::Io,
                        format!("cannot start a thread to migrate files: {e}"),
                    ));
                }
                break;
            }
        }
        drop(tx);
        for event in rx {
            let told = match event {
                Migrating::File(i) => match files[i] {
                    Step::Migrate { path, .. } => progress(Tick::File(path)),
                    _ => Ok(()),
                },
                Migrating::Bytes(n) => progress(Tick::Bytes(n)),
                Migrating::Done(i, Ok(m)) => {
                    done += 1;
                    if let Some(m) = m {
                        migrated.push((i, m));
                    }
                    Ok(())
                }
                Migrating::Done(_, Err(e)) => Err(e),
            };
            if let Err(e) = told {
                stop.store(true, Ordering::SeqCst);
                // An interruption says more than what it interrupted.
                if failure.is_none()
                    || (e.kind() == ErrorKind::Interrupted
                        && failure
                            .as_ref()
                            .is_some_and(|f| f.kind() != ErrorKind::Interrupted))
                {
                    failure = Some(e);
                }
            }
        }
    });
    migrated.sort_by_key(|(i, _)| *i);
    out.migrated.extend(migrated.into_iter().map(|(_, m)| m));
    // One commit makes every finished swap durable (each copy's data was
    // flushed before its swap), also when another file failed.
    if done > 0
        && let Some((root_path, root)) = &opts.root
        && let Err(e) = btrfs::commit(root.file.as_fd(), root_path)
    {
        return Err((done, failure.unwrap_or(e)));
    }
    match failure {
        Some(e) => Err((done, e)),
        None => Ok(done),
    }
}

/// The planned directory `dir`, opened from the directory the walk held
/// (never through a link, never outside it) and checked to be the same
/// (dev, inode) as when planned.
fn planned_dir(opts: &ExecOptions, dir: &Path, id: FileIdentity) -> Result<fs::File> {
    let Some((root_path, root)) = &opts.root else {
        return Err(Error::new(
            ErrorKind::State,
            format!("{} was not walked before it was planned", dir.display()),
        ));
    };
    let rel = dir.strip_prefix(root_path).map_err(|_| {
        Error::new(
            ErrorKind::State,
            format!("{} is outside {}", dir.display(), root_path.display()),
        )
    })?;
    scan::open_beneath(root, rel, id, dir)
}

fn split_dir(path: &Path) -> Result<(&Path, &std::ffi::OsStr)> {
    match (path.parent(), path.file_name()) {
        (Some(p), Some(n)) => Ok((p, n)),
        _ => Err(Error::usage(format!("cannot create {}", path.display()))),
    }
}

/// Records the identity of a directory this run created.
fn remember(opts: &mut ExecOptions, path: &Path, dir: &fs::File) -> Result<()> {
    let id = FileIdentity::of(dir).map_err(|e| Error::from_io(&e, "cannot stat", path))?;
    opts.created.push((path.to_path_buf(), id));
    Ok(())
}

/// The existing directory the plan starts from, or one this run created,
/// opened from the held directory and checked as [`planned_dir`] does.
fn created_or_planned_dir(opts: &ExecOptions, dir: &Path) -> Result<fs::File> {
    let id = match &opts.root {
        Some((root_path, root)) if root_path == dir => root.id,
        _ => opts
            .created
            .iter()
            .find(|(p, _)| p == dir)
            .map(|(_, id)| *id)
            .ok_or_else(|| {
                Error::new(
                    ErrorKind::State,
                    format!(
                        "{} was neither found nor created by this run",
                        dir.display()
                    ),
                )
            })?,
    };
    planned_dir(opts, dir, id)
}

/// The directory of the planned file `path`, as [`planned_dir`].
fn parent_dir(opts: &ExecOptions, path: &Path, id: FileIdentity) -> Result<fs::File> {
    let dir = path.parent().ok_or_else(|| {
        Error::new(
            ErrorKind::WrongTarget,
            format!("{} has no parent directory", path.display()),
        )
    })?;
    planned_dir(opts, dir, id)
}

fn run_step(
    step: &Step,
    opts: &mut ExecOptions,
    progress: &mut dyn FnMut(Tick<'_>) -> Result<()>,
    out: &mut Outcome,
) -> Result<()> {
    signals::check()?;
    match step {
        Step::CreateDirectory { path } => {
            let (parent, name) = split_dir(path)?;
            let parent = created_or_planned_dir(opts, parent)?;
            let made = beneath::mkdir_at(&parent, name, path)?;
            remember(opts, path, &made)?;
            out.created.push(path.clone());
        }
        Step::CreateSubvolume { path } => {
            let (parent, name) = split_dir(path)?;
            let parent = created_or_planned_dir(opts, parent)?;
            let made = beneath::create_subvolume_at(&parent, name, path)?;
            remember(opts, path, &made)?;
            out.created.push(path.clone());
            out.subvolume = Some(path.clone());
        }
        Step::SetNocow {
            path,
            clear_compression,
            id,
        } => {
            match id {
                Some(id) => {
                    let dir = planned_dir(opts, path, *id)?;
                    filesystem::set_nocow(&dir, path, *clear_compression)?;
                }
                None => {
                    let dir = created_or_planned_dir(opts, path)?;
                    filesystem::set_nocow(&dir, path, *clear_compression)?;
                }
            }
            out.nocow_set.push(path.clone());
        }
        Step::RemoveLeftover { path, id, dir_id } => {
            migrate::remove_leftover(parent_dir(opts, path, *dir_id)?, path, *id)?;
            out.removed_leftovers.push(path.clone());
        }
        Step::ClearMarker { path, id, dir_id } => {
            migrate::clear_marker(parent_dir(opts, path, *dir_id)?, path, *id)?;
            out.cleared_markers.push(path.clone());
        }
        Step::SwitchEmpty { path, id, dir_id } => {
            migrate::switch_empty(parent_dir(opts, path, *dir_id)?, path, *id)?;
            out.switched.push(path.clone());
        }
        Step::Migrate { .. } => {
            migrate_files(&[step], 1, opts, progress, out).map_err(|(_, e)| e)?;
        }
    }
    Ok(())
}
