//! Carrying out `sandbox up` and `down`, and reading a sandbox's live state.

use std::path::{Path, PathBuf};

use super::plan::{FsKind, SandboxPlan};
use super::report::{
    DeviceStatus, DownDryRun, DownPlan, DownReport, DownResult, SandboxState, SandboxStatus,
    down_plan, select,
};
use super::state::{DeviceRecord, SandboxRecord, StateStore};
use crate::error::{Error, ErrorKind, Result, exit};
use crate::sys::block::loopdev::{self, DetachOutcome, FileIdentity};
use crate::sys::fs::beneath::{Leaf, Removal, TrustedDir};
use crate::sys::fs::root::SysRoot;
use crate::sys::{fs::filesystem, fs::mounts, is_root, kernel::btrfs, kernel::signals, tools};
use crate::ui::Ui;

/// A sandbox that exists. Dropping it tears it down (panics included),
/// unless [`Sandbox::keep`] was called: that is what tests rely on.
#[derive(Debug)]
pub struct Sandbox {
    record: SandboxRecord,
    store: StateStore,
    armed: bool,
}

impl Sandbox {
    /// Creates the sandbox of `plan`. On any failure, or on SIGINT, SIGTERM
    /// or SIGHUP (with [`signals::install`]), everything made so far is
    /// removed again before the error is returned; after a signal the error
    /// is the interruption, also when a step failed because of it (a
    /// terminal's Ctrl-C reaches mkfs too, which then dies). The sandbox
    /// directory is checked before anything is recorded: a `--dir` that is
    /// a file, not empty or not root's alone is refused with no record left.
    pub fn up(plan: &SandboxPlan, store: &StateStore) -> Result<Sandbox> {
        Self::up_unchecked(plan, store).map_err(|e| match signals::check() {
            Err(stop) => stop,
            Ok(()) => e,
        })
    }

    fn up_unchecked(plan: &SandboxPlan, store: &StateStore) -> Result<Sandbox> {
        if !is_root() {
            return Err(Error::new(
                ErrorKind::Permission,
                "a sandbox needs root (loop devices and mount)",
            )
            .with_hint("run it as root, e.g. with sudo"));
        }
        let mkfs = tools::find(plan.fs.mkfs(), plan.fs.package())?;
        let (parent_path, dir_name) = split_dir(&plan.dir)?;
        refuse_memory_backed(&parent_path)?;
        // The parent: the sandbox root (root's alone, made 0755 if missing),
        // or a --dir's parent (which may be a sticky shared directory, since
        // the sandbox directory itself is then made by us, 0700).
        let parent = if plan.dir_given {
            TrustedDir::create(&parent_path, Leaf::SharedSticky, 0o755)?.0
        } else {
            TrustedDir::create(&parent_path, Leaf::Private, 0o755)?.0
        };
        // Refused before anything is recorded (prepare_dir checks again
        // once the record exists, for a directory made meanwhile).
        store.check_free(&plan.name)?;
        check_dir(&parent, &dir_name)?;
        signals::check()?;
        let mut sandbox = Sandbox {
            record: SandboxRecord::new(plan),
            store: store.clone(),
            armed: false,
        };
        store.create(&sandbox.record)?;
        sandbox.armed = true;
        sandbox.build(plan, &parent, &dir_name, &mkfs)?;
        Ok(sandbox)
    }

    fn build(
        &mut self,
        plan: &SandboxPlan,
        parent: &TrustedDir,
        dir_name: &str,
        mkfs: &tools::Tool,
    ) -> Result<()> {
        let (dir, created) = prepare_dir(parent, dir_name)?;
        self.record.dir_created = created;
        self.record.dir_identity = Some(dir.identity()?);
        self.save()?;
        if is_btrfs_dir(dir.path()) {
            // Backing files on btrfs must be NOCOW, or the loop driver's
            // O_DIRECT writes to them are turned buffered by the host btrfs.
            if let Ok(f) = dir.open_dir_file() {
                let _ = filesystem::set_nocow(&f, dir.path(), false);
            }
        }
        let mut files = Vec::new();
        for (i, image) in plan.images.iter().enumerate() {
            signals::check()?;
            self.record.devices.push(DeviceRecord {
                image: image.clone(),
                identity: None,
                loop_device: None,
                diskseq: None,
            });
            self.save()?;
            let f = dir.create_file(image_name(i), 0o600)?;
            f.set_len(plan.size_bytes)
                .map_err(|e| Error::from_io(&e, "cannot size backing file", image))?;
            let identity =
                FileIdentity::of(&f).map_err(|e| Error::from_io(&e, "cannot stat", image))?;
            self.record
                .devices
                .last_mut()
                .expect("just pushed")
                .identity = Some(identity);
            self.save()?;
            files.push(f);
        }
        let root = SysRoot::host();
        for (i, file) in files.iter().enumerate() {
            signals::check()?;
            // Attached from the descriptor that created the image (never
            // reopened by path), verified, and set to detach by itself
            // until it is recorded.
            let attached = loopdev::attach_file(file, &plan.images[i], true)?;
            self.record.devices[i].loop_device = Some(attached.device.path.clone());
            self.record.devices[i].diskseq = attached.binding.diskseq;
            self.save()?;
            let dev = attached.keep()?;
            if !loopdev::direct_io_enabled(&root, &dev)? {
                return Err(Error::new(
                    ErrorKind::Unsupported,
                    format!(
                        "{} could not use direct I/O on {}",
                        dev.path.display(),
                        plan.images[i].display()
                    ),
                )
                .with_hint("put the sandbox on a disk filesystem that supports O_DIRECT (--dir)"));
            }
        }
        drop(files);
        signals::check()?;
        let mnt = dir.mkdir(MOUNT_DIR, 0o755)?;
        self.record.mount_point_created = true;
        self.record.mount_point_identity = Some(mnt.identity()?);
        self.save()?;
        let devices: Vec<PathBuf> = self.record.loop_devices().map(Path::to_path_buf).collect();
        let mut args = plan.mkfs_arguments();
        args.extend(devices.iter().map(|d| d.display().to_string()));
        mkfs.run(&args)?;
        signals::check()?;
        if plan.fs == FsKind::Btrfs {
            for d in &devices {
                btrfs::scan_device(d)?;
            }
        }
        mounts::mount_beneath(&devices[0], &dir, MOUNT_DIR, plan.fs.name())?;
        self.record.mounted = true;
        self.record.complete = true;
        self.save()?;
        Ok(())
    }

    fn save(&self) -> Result<()> {
        self.store.save(&self.record)
    }

    /// Keeps the sandbox after this value is dropped (the CLI's `up`).
    pub fn keep(mut self) -> SandboxRecord {
        self.armed = false;
        self.record.clone()
    }

    /// The record.
    pub fn record(&self) -> &SandboxRecord {
        &self.record
    }

    /// Where it is mounted.
    pub fn mount_point(&self) -> &Path {
        &self.record.mount_point
    }

    /// Its loop devices.
    pub fn devices(&self) -> Vec<PathBuf> {
        self.record.loop_devices().map(Path::to_path_buf).collect()
    }

    /// Tears it down now, reporting what was done.
    pub fn down(mut self) -> Result<DownReport> {
        self.armed = false;
        teardown(&self.store, &self.record)
    }
}

impl Drop for Sandbox {
    fn drop(&mut self) {
        if self.armed
            && let Err(e) = teardown(&self.store, &self.record)
        {
            // Nobody gave the guard a Ui (it may be dropped in a panic):
            // the library's plain one says it, an error even with --quiet.
            crate::ui::StderrUi::default().error(&Error::new(
                e.kind(),
                format!(
                    "could not remove sandbox {}: {}",
                    self.record.name,
                    e.message()
                ),
            ));
        }
    }
}

/// `f` again while it fails as busy, for up to three seconds: a mount or
/// loop device just used is held for a moment by short-lived openers (udev's
/// blkid probe after a change, a writeback flush). Each try checks again
/// from the start; a holder that stays is reported.
fn while_busy<T>(mut f: impl FnMut() -> Result<T>) -> Result<T> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(3);
    loop {
        match f() {
            Err(e) if e.kind() == ErrorKind::Busy && std::time::Instant::now() < deadline => {
                std::thread::sleep(std::time::Duration::from_millis(100));
            }
            r => return r,
        }
    }
}

/// The mount point's name inside the sandbox directory.
const MOUNT_DIR: &str = "mnt";

fn image_name(i: usize) -> String {
    format!("dev{i}.img")
}

/// Splits the sandbox directory into its parent and its (plain) name.
fn split_dir(dir: &Path) -> Result<(PathBuf, String)> {
    let name = dir
        .file_name()
        .and_then(|n| n.to_str())
        .filter(|n| !n.is_empty());
    match (dir.parent(), name) {
        (Some(p), Some(n)) if n != ".." && n != "." => Ok((p.to_path_buf(), n.to_owned())),
        _ => Err(
            Error::usage(format!("{} cannot hold a sandbox", dir.display()))
                .with_hint("give a new directory with --dir"),
        ),
    }
}

fn refuse_memory_backed(dir: &Path) -> Result<()> {
    let mut probe = dir.to_path_buf();
    while !probe.exists() {
        if !probe.pop() {
            return Ok(());
        }
    }
    let info = filesystem::inspect_dir(&SysRoot::host(), &probe)?;
    if filesystem::is_memory_backed(&info.mount.fs_type) {
        return Err(Error::new(
            ErrorKind::Unsupported,
            format!(
                "{} is on {}, which cannot back loop devices with direct I/O",
                probe.display(),
                info.mount.fs_type
            ),
        )
        .with_hint(
            "choose a directory on a disk filesystem with --dir (the default is under /var/tmp)",
        ));
    }
    Ok(())
}

fn is_btrfs_dir(dir: &Path) -> bool {
    filesystem::inspect_dir(&SysRoot::host(), dir).is_ok_and(|i| i.mount.fs_type == "btrfs")
}

/// Checks that `name` in `parent` can become the sandbox directory: absent,
/// or an empty directory that only root can write.
fn check_dir(parent: &TrustedDir, name: &str) -> Result<()> {
    existing_dir(parent, name).map(|_| ())
}

/// Creates `name` in `parent` (mode 0700), or accepts an existing empty
/// directory that only root can write. Returns it, and whether it was made.
fn prepare_dir(parent: &TrustedDir, name: &str) -> Result<(TrustedDir, bool)> {
    match existing_dir(parent, name)? {
        None => Ok((parent.mkdir(name, 0o700)?, true)),
        Some(dir) => Ok((dir, false)),
    }
}

/// `name` in `parent` if it is an empty directory only root can write,
/// `None` if there is nothing by that name, an error otherwise.
fn existing_dir(parent: &TrustedDir, name: &str) -> Result<Option<TrustedDir>> {
    let path = parent.join(name);
    match parent.stat(name)? {
        None => Ok(None),
        Some(st) => {
            if !filesystem::is_directory_mode(st.st_mode) {
                return Err(Error::new(
                    ErrorKind::WrongTarget,
                    format!("{} exists and is not a directory", path.display()),
                )
                .with_hint("give a new or empty directory with --dir"));
            }
            let dir = parent.open_dir(name).map_err(|e| {
                if e.kind() == ErrorKind::Permission {
                    e.with_hint("give a new directory with --dir; btrfs-lab creates it")
                } else {
                    e
                }
            })?;
            if !dir.is_empty()? {
                return Err(Error::new(
                    ErrorKind::WrongTarget,
                    format!("{} is not empty", path.display()),
                )
                .with_hint("give a new or empty directory with --dir"));
            }
            Ok(Some(dir))
        }
    }
}

/// `sandbox down`: which sandboxes (`target` by name, mount point or
/// directory, or `all`), and how.
#[derive(Debug, Clone, Copy, Default)]
pub struct DownRequest<'a> {
    /// The sandbox: its name, mount point or directory.
    pub target: Option<&'a str>,
    /// Every sandbox this user made.
    pub all: bool,
    /// With `all`: every user's, and records that do not say who made them.
    pub everyone: bool,
    /// Only the plan.
    pub dry_run: bool,
    /// Do not ask.
    pub yes: bool,
}

/// What `sandbox down` did.
#[derive(Debug)]
pub enum DownOutcome {
    /// `--dry-run`: what it would do; nothing was done.
    DryRun(DownDryRun),
    /// What was removed.
    Done {
        /// The sandboxes removed.
        result: DownResult,
        /// How many sandboxes were to be removed (0: there were none).
        selected: usize,
        /// The exit status: 130 when a teardown was interrupted, 1 when one
        /// failed (or, with `all`, a record file was not a record), else 0.
        status: u8,
    },
}

/// `sandbox down`: loads the records (each file that is not one is an
/// error through `ui`, never acted on), picks the sandboxes, plans; then,
/// unless a dry run, shows the plan (`describe` renders it), asks through
/// `ui` unless `yes`, and tears each one down. One sandbox that cannot be
/// removed does not stop the others: its error goes to `ui` (with the way
/// out, `--forget`, when down can never act on it) and the status says so.
pub fn down(
    store: &StateStore,
    req: &DownRequest<'_>,
    ui: &dyn Ui,
    describe: &dyn Fn(&[DownPlan]) -> String,
) -> Result<DownOutcome> {
    let loaded = store.load()?;
    for e in &loaded.bad {
        ui.error(e);
    }
    let bad = loaded.bad.len();
    let mut records = select(loaded.records, req.target, req.all)?;
    if req.all && !req.everyone {
        let me = super::state::Maker::current().user();
        let (mine, others): (Vec<_>, Vec<_>) = records
            .into_iter()
            .partition(|r| r.made_by.as_ref().is_some_and(|m| m.user() == me));
        if !others.is_empty() {
            let names: Vec<&str> = others.iter().map(|r| r.name.as_str()).collect();
            ui.note(&format!(
                "left {}, made by another user or by an earlier version ({}): --all --everyone removes them too",
                crate::report::text::count(others.len() as u64, "sandbox", "sandboxes"),
                names.join(", ")
            ));
        }
        records = mine;
    }
    let plans: Vec<DownPlan> = records.iter().map(|r| down_plan(&status(r), r)).collect();
    if req.dry_run {
        return Ok(DownOutcome::DryRun(DownDryRun {
            dry_run: true,
            sandboxes: plans,
        }));
    }
    if !plans.is_empty() && !req.yes {
        ui.say(&describe(&plans));
        let what = if plans.len() == 1 {
            format!("sandbox {}", plans[0].name)
        } else {
            format!("{} sandboxes", plans.len())
        };
        ui.confirm(&format!("Remove {what}?"), false)?;
    }
    let mut removed = Vec::new();
    let mut first_error: Option<Error> = None;
    for r in &records {
        match teardown(store, r) {
            Ok(rep) => removed.push(rep),
            Err(e) => {
                ui.error(&down_error(r, &e));
                first_error.get_or_insert(e);
            }
        }
    }
    let code = match first_error {
        Some(e) if e.kind() == ErrorKind::Interrupted => exit::INTERRUPTED,
        Some(_) => exit::ERROR,
        None if bad > 0 && req.all => exit::ERROR,
        None => exit::OK,
    };
    Ok(DownOutcome::Done {
        result: DownResult { removed },
        selected: records.len(),
        status: code,
    })
}

/// The error of one sandbox `down` could not remove, named; for one that
/// `down` can never act on (its directory is not the one up made, not
/// root's, not a directory) the hint says how to drop the record once the
/// rest is dealt with.
fn down_error(r: &SandboxRecord, e: &Error) -> Error {
    let shown = Error::new(e.kind(), format!("sandbox {}: {}", r.name, e.message()));
    if matches!(
        e.kind(),
        ErrorKind::State | ErrorKind::WrongTarget | ErrorKind::Permission
    ) {
        shown.with_hint(format!(
            "{}{}if nothing of it is left to remove, remove only its record: btrfs-lab sandbox down --forget {}",
            e.hint().unwrap_or(""),
            if e.hint().is_some() { "; " } else { "" },
            r.name
        ))
    } else if let Some(h) = e.hint() {
        shown.with_hint(h.to_owned())
    } else {
        shown
    }
}

/// Removes what `record` says `up` made, and nothing else. The record must
/// be valid ([`SandboxRecord::validate`]) and the sandbox directory's whole
/// path root's alone, or nothing is touched. Then: the mount only if the
/// mount on `DIR/mnt` (found by descriptor and mount ID, unmounted with
/// `UMOUNT_NOFOLLOW`) has one of our loop devices as source; a loop device
/// only if it is the recorded one, still bound to our backing file (device,
/// inode) by the recorded attachment (disk sequence number); files and
/// directories only through the held directory and only if their identity
/// is the recorded one (no recorded identity: left alone). A loop device
/// someone else bound to our image keeps the image (and the record). The
/// record is deleted only once everything is gone, so `down` can be retried.
pub fn teardown(store: &StateStore, record: &SandboxRecord) -> Result<DownReport> {
    record.validate()?;
    let root = SysRoot::host();
    let mut report = DownReport {
        name: record.name.clone(),
        ..DownReport::default()
    };
    // `up` stopped before it made anything (the directory is recorded
    // before anything is made in it): there is nothing to remove and
    // nothing to look at, whatever is at DIR now. Only the record goes.
    if made_nothing(record) {
        if std::fs::symlink_metadata(&record.dir).is_ok() {
            report.left.push(format!(
                "{} was not made by sandbox up; left alone",
                record.dir.display()
            ));
        }
        store.remove(&record.name)?;
        return Ok(report);
    }
    let (parent_path, dir_name) = split_dir(&record.dir)?;
    let dir = open_recorded_dir(record)?;
    let mut ours = our_loop_devices(record);
    // Loop devices bound to files in the sandbox's own directory that `up`
    // did not record (images made there to rehearse `device add` or
    // `replace`): the directory is root's alone and was made by `up`, so
    // they are the sandbox's too; found by their backing files, never by
    // path alone.
    let extra = match &dir {
        Some(d) => loops_on_files_in(&root, d, record, &ours)?,
        None => Vec::new(),
    };
    ours.extend(extra.iter().map(|(_, o)| o.clone()));
    let our_names: Vec<String> = ours.iter().map(|o| o.path.display().to_string()).collect();
    if record.fs == FsKind::Btrfs && dir.is_some() {
        note_added_members(&root, record, &our_names, &mut report)?;
    }
    // 1. Unmount, if what is mounted on DIR/mnt is ours.
    if let Some(d) = &dir {
        unmount_ours(&root, d, record, &our_names, &mut report)?;
    }
    refuse_mounted_elsewhere(&root, &our_names)?;
    // 2. Forget and detach exactly the loop devices `up` attached.
    detach_ours(&root, store, record, &ours, &mut report)?;
    refuse_foreign_loops(&root, store, record)?;
    // 3. Delete the backing files, by identity, through the held directory.
    if let Some(d) = &dir {
        remove_images(d, record, &extra, &mut report)?;
        // 4. Directories, only if we created them, they are the ones we
        //    created, and they are empty.
        if record.mount_point_created {
            remove_dir(
                d,
                MOUNT_DIR,
                record.mount_point_identity,
                &record.mount_point,
                &mut report,
            )?;
        }
    }
    if record.dir_created && dir.is_some() {
        drop(dir);
        match TrustedDir::open(&parent_path, Leaf::SharedSticky) {
            Ok(parent) => {
                remove_dir(
                    &parent,
                    &dir_name,
                    record.dir_identity,
                    &record.dir,
                    &mut report,
                )?;
            }
            Err(e) => report.left.push(format!(
                "{} left in place: {}",
                record.dir.display(),
                e.message()
            )),
        }
    }
    store.remove(&record.name)?;
    Ok(report)
}

/// The sandbox directory, held; `None` when it is gone. One that is not
/// the directory `up` made (its recorded identity) is refused.
fn open_recorded_dir(record: &SandboxRecord) -> Result<Option<TrustedDir>> {
    let dir = match TrustedDir::open(&record.dir, Leaf::Private) {
        Ok(d) => d,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(None),
        Err(e) => {
            return Err(Error::new(
                e.kind(),
                format!("{}; not touching sandbox {}", e.message(), record.name),
            )
            .with_hint(
                e.hint()
                    .unwrap_or("inspect the directory by hand")
                    .to_owned(),
            ));
        }
    };
    if let Some(want) = record.dir_identity
        && dir.identity()? != want
    {
        return Err(Error::new(
            ErrorKind::State,
            format!(
                "{} is not the directory sandbox up made for {}; not touching it",
                record.dir.display(),
                record.name
            ),
        )
        .with_hint("inspect it by hand; remove the record once it is cleaned up"));
    }
    Ok(Some(dir))
}

/// Devices added to the sandbox's btrfs after `up` (`device add`) from
/// elsewhere are not ours: left as they are, and said so.
fn note_added_members(
    root: &SysRoot,
    record: &SandboxRecord,
    our_names: &[String],
    report: &mut DownReport,
) -> Result<()> {
    let table = crate::sys::proc::mountinfo::mount_table(root)?;
    let mounted_here = table
        .iter()
        .any(|m| m.mount_point == record.mount_point && our_names.contains(&m.source));
    if !mounted_here {
        return Ok(());
    }
    let Ok(members) = btrfs::devices(&record.mount_point) else {
        return Ok(());
    };
    for m in members
        .iter()
        .filter(|m| !m.path.is_empty() && !our_names.contains(&m.path))
    {
        let loop_hint = if m.path.starts_with("/dev/loop") {
            format!("; if it is yours: losetup -d {}", m.path)
        } else {
            String::new()
        };
        report.left.push(format!(
            "{} was added to the sandbox's filesystem after up (device {}): not made by up, left attached{loop_hint}",
            m.path, m.devid
        ));
    }
    Ok(())
}

/// Unmounts what is mounted on DIR/mnt if it is ours (repeated for mounts
/// stacked there by us; stops at the first that is not ours).
fn unmount_ours(
    root: &SysRoot,
    d: &TrustedDir,
    record: &SandboxRecord,
    our_names: &[String],
    report: &mut DownReport,
) -> Result<()> {
    for _ in 0..8 {
        let unmounted = while_busy(|| {
            mounts::unmount_beneath(root, d, MOUNT_DIR, |m| mount_is_ours(m, our_names))
        })?;
        match unmounted {
            mounts::Unmounted::NotMounted => break,
            mounts::Unmounted::Unmounted(_) => report.unmounted = Some(record.mount_point.clone()),
        }
    }
    Ok(())
}

/// Our devices mounted somewhere else were mounted by someone else: refused.
fn refuse_mounted_elsewhere(root: &SysRoot, our_names: &[String]) -> Result<()> {
    let table = crate::sys::proc::mountinfo::mount_table(root)?;
    if let Some(m) = table.iter().find(|m| our_names.contains(&m.source)) {
        return Err(Error::new(
            ErrorKind::Busy,
            format!(
                "{} is also mounted at {}",
                m.source,
                m.mount_point.display()
            ),
        )
        .with_hint(format!(
            "unmount it first: umount {}",
            m.mount_point.display()
        )));
    }
    Ok(())
}

/// Forgets and detaches exactly our loop devices, then records that the
/// recorded attachments are gone.
fn detach_ours(
    root: &SysRoot,
    store: &StateStore,
    record: &SandboxRecord,
    ours: &[OurLoop],
    report: &mut DownReport,
) -> Result<()> {
    for d in &record.devices {
        let Some(recorded) = &d.loop_device else {
            continue;
        };
        if !ours.iter().any(|o| &o.path == recorded)
            && loopdev::binding(recorded).ok().flatten().is_some()
        {
            report.left.push(format!(
                "{} is no longer the attachment sandbox up made; left alone",
                recorded.display()
            ));
        }
    }
    for o in ours {
        if record.fs == FsKind::Btrfs {
            btrfs::forget_device(&o.path);
        }
        match loopdev::detach_exact(root, &o.path, o.identity, o.diskseq)? {
            DetachOutcome::Detached => report.detached.push(o.path.clone()),
            DetachOutcome::AlreadyFree => {}
            DetachOutcome::NotOurs => report.left.push(format!(
                "{} now belongs to another file; left alone",
                o.path.display()
            )),
        }
    }
    // Every recorded attachment is now gone or someone else's. Record that
    // before anything can fail, so a retried `down` does not look at those
    // loop device numbers again: the kernel hands them to the next user.
    let mut progress = record.clone();
    for d in &mut progress.devices {
        d.loop_device = None;
        d.diskseq = None;
    }
    if progress != *record {
        store.save(&progress)?;
    }
    Ok(())
}

/// Loop devices bound to our images that `up` did not attach (someone ran
/// losetup by hand): left alone, and the image with them — refused.
fn refuse_foreign_loops(root: &SysRoot, store: &StateStore, record: &SandboxRecord) -> Result<()> {
    let mut foreign = Vec::new();
    for d in &record.devices {
        let Some(identity) = d.identity else { continue };
        for dev in loopdev::find_by_backing_file(root, &d.image) {
            let bound = loopdev::binding(&dev).ok().flatten();
            if bound.is_some_and(|b| b.identity == identity) {
                foreign.push(dev);
            }
        }
    }
    if foreign.is_empty() {
        return Ok(());
    }
    let names: Vec<String> = foreign.iter().map(|p| p.display().to_string()).collect();
    Err(Error::new(
        ErrorKind::Busy,
        format!(
            "{} {} bound to the sandbox's image but was not attached by sandbox up; left alone, and the image with it",
            names.join(", "),
            if names.len() == 1 { "is" } else { "are" }
        ),
    )
    .with_hint(format!(
        "detach it if it is yours (losetup -d {}), then run: {}",
        names.join(" "),
        store.down_command(&record.name)
    )))
}

/// Deletes the recorded images, and the images in the directory whose loop
/// devices were detached (made there for a rehearsal), by identity.
fn remove_images(
    d: &TrustedDir,
    record: &SandboxRecord,
    extra: &[(std::ffi::OsString, OurLoop)],
    report: &mut DownReport,
) -> Result<()> {
    for (i, dev) in record.devices.iter().enumerate() {
        let Some(identity) = dev.identity else {
            if d.stat(image_name(i))?.is_some() {
                report.left.push(format!(
                    "{} has no recorded identity; left alone",
                    dev.image.display()
                ));
            }
            continue;
        };
        match d.remove_file(image_name(i), identity)? {
            Removal::Removed => report.removed.push(dev.image.clone()),
            Removal::Absent => {}
            Removal::NotOurs | Removal::NotEmpty => report.left.push(format!(
                "{} is not the file sandbox up created; left alone",
                dev.image.display()
            )),
        }
    }
    for (name, o) in extra {
        if !report.detached.contains(&o.path) {
            continue;
        }
        match d.remove_file(name, o.identity)? {
            Removal::Removed => report.removed.push(d.join(name)),
            Removal::Absent => {}
            Removal::NotOurs | Removal::NotEmpty => report.left.push(format!(
                "{} changed while down ran; left alone",
                d.join(name).display()
            )),
        }
    }
    Ok(())
}

/// True if the record shows that `up` made nothing yet.
fn made_nothing(record: &SandboxRecord) -> bool {
    !record.dir_created
        && record.dir_identity.is_none()
        && record.devices.is_empty()
        && !record.mount_point_created
        && !record.mounted
}

/// What `down --forget` leaves in place: the parts of the sandbox that
/// still exist, as they look now, each with the command that removes it
/// (loop devices found by their backing files in the sandbox directory
/// too). Pure description; nothing is touched.
pub fn forget_leaves(record: &SandboxRecord) -> Vec<String> {
    let shown = |argv: &[&str]| tools::display_argv(argv);
    let s = status(record);
    let mut left = Vec::new();
    if s.mounted {
        let m = record.mount_point.display().to_string();
        left.push(format!("the mount on {m} ({})", shown(&["umount", &m])));
    }
    for d in s.devices.iter().chain(&s.extra_devices) {
        if let Some(l) = &d.loop_device {
            let l = l.display().to_string();
            left.push(format!(
                "loop device {l} (backing file {}; {})",
                d.image.display(),
                shown(&["losetup", "-d", &l])
            ));
        }
    }
    for image in record
        .devices
        .iter()
        .map(|d| &d.image)
        .chain(s.extra_devices.iter().map(|d| &d.image))
    {
        if std::fs::symlink_metadata(image).is_ok() {
            let f = image.display().to_string();
            left.push(format!("file {f} ({})", shown(&["rm", &f])));
        }
    }
    if std::fs::symlink_metadata(&record.dir).is_ok() {
        let d = record.dir.display().to_string();
        left.push(format!(
            "{d} ({} once the rest is gone)",
            shown(&["rmdir", &d])
        ));
    }
    left
}

fn remove_dir(
    parent: &TrustedDir,
    name: &str,
    identity: Option<FileIdentity>,
    path: &Path,
    report: &mut DownReport,
) -> Result<()> {
    let Some(identity) = identity else {
        if parent.stat(name)?.is_some() {
            report.left.push(format!(
                "{} has no recorded identity; left in place",
                path.display()
            ));
        }
        return Ok(());
    };
    match parent.remove_dir(name, identity)? {
        Removal::Removed => report.removed.push(path.to_path_buf()),
        Removal::Absent => {}
        Removal::NotOurs => report.left.push(format!(
            "{} is not the directory sandbox up created; left in place",
            path.display()
        )),
        Removal::NotEmpty => report.left.push(format!(
            "{} holds files btrfs-lab did not create; left in place",
            path.display()
        )),
    }
    Ok(())
}

/// The mount's source is one of our loop devices; or, for a sandbox grown
/// with `device add` (which may show a newer member as the source), one of
/// our loop devices is a member of the mounted btrfs.
fn mount_is_ours(m: &crate::parse::mountinfo::MountEntry, our_names: &[String]) -> bool {
    our_names.contains(&m.source)
        || (m.fs_type == "btrfs"
            && btrfs::devices(&m.mount_point)
                .is_ok_and(|devs| devs.iter().any(|d| our_names.contains(&d.path))))
}

/// A recorded loop device that is still the attachment `up` made.
#[derive(Debug, Clone)]
struct OurLoop {
    path: PathBuf,
    identity: FileIdentity,
    diskseq: Option<u64>,
}

/// The recorded loop devices still bound to our images by the recorded
/// attachment. Nothing is found by path: an unrecorded device is not ours.
fn our_loop_devices(record: &SandboxRecord) -> Vec<OurLoop> {
    let mut found: Vec<OurLoop> = Vec::new();
    for d in &record.devices {
        let (Some(identity), Some(dev)) = (d.identity, &d.loop_device) else {
            continue;
        };
        let bound = loopdev::binding(dev).ok().flatten();
        if bound.is_some_and(|b| loopdev::same_binding(b, identity, d.diskseq))
            && !found.iter().any(|o| &o.path == dev)
        {
            found.push(OurLoop {
                path: dev.clone(),
                identity,
                diskseq: d.diskseq,
            });
        }
    }
    found
}

/// Loop devices bound to regular files directly in the sandbox directory
/// `d` that are not the recorded images' attachments in `ours`: each with
/// its file's name. A device counts only while its binding is that very
/// file (device and inode), read through the held directory.
fn loops_on_files_in(
    root: &SysRoot,
    d: &TrustedDir,
    record: &SandboxRecord,
    ours: &[OurLoop],
) -> Result<Vec<(std::ffi::OsString, OurLoop)>> {
    let mut found = Vec::new();
    for name in d.names()? {
        let Some(st) = d.stat(&name)? else { continue };
        if !filesystem::is_regular_mode(st.st_mode) {
            continue;
        }
        let identity = FileIdentity {
            dev: st.st_dev,
            ino: st.st_ino,
        };
        let path = d.join(&name);
        for dev in loopdev::find_by_backing_file(root, &path) {
            if ours.iter().any(|o| o.path == dev)
                || found.iter().any(|(_, o): &(_, OurLoop)| o.path == dev)
            {
                continue;
            }
            let bound = loopdev::binding(&dev).ok().flatten();
            if bound.is_some_and(|b| b.identity == identity) {
                found.push((
                    name.clone(),
                    OurLoop {
                        path: dev,
                        identity,
                        diskseq: bound.and_then(|b| b.diskseq),
                    },
                ));
            }
        }
    }
    // A recorded image bound by an attachment `up` did not make (someone
    // ran losetup on it) stays someone else's: the check below says so.
    found.retain(|(name, _)| {
        !record
            .devices
            .iter()
            .any(|r| r.image.file_name() == Some(name.as_os_str()))
    });
    Ok(found)
}

/// The live status of a recorded sandbox.
pub fn status(record: &SandboxRecord) -> SandboxStatus {
    let root = SysRoot::host();
    let ours = our_loop_devices(record);
    let held = TrustedDir::open(&record.dir, Leaf::Private).ok();
    let extra = held
        .as_ref()
        .and_then(|d| loops_on_files_in(&root, d, record, &ours).ok())
        .unwrap_or_default();
    let names: Vec<String> = ours
        .iter()
        .chain(extra.iter().map(|(_, o)| o))
        .map(|o| o.path.display().to_string())
        .collect();
    let mounted = held
        .and_then(|d| d.open_path(MOUNT_DIR).ok().map(|fd| (d, fd)))
        .and_then(|(d, fd)| {
            mounts::mount_rooted_at(&root, std::os::fd::AsFd::as_fd(&fd), &d.join(MOUNT_DIR))
                .ok()
                .flatten()
        })
        .is_some_and(|m| mount_is_ours(&m, &names));
    let devices: Vec<DeviceStatus> = record
        .devices
        .iter()
        .map(|d| DeviceStatus {
            image: d.image.clone(),
            loop_device: ours
                .iter()
                .find(|o| Some(o.identity) == d.identity && d.loop_device.as_ref() == Some(&o.path))
                .map(|o| o.path.clone()),
        })
        .collect();
    let attached = devices.iter().filter(|d| d.loop_device.is_some()).count();
    let extra_devices: Vec<DeviceStatus> = extra
        .into_iter()
        .map(|(name, o)| DeviceStatus {
            image: record.dir.join(name),
            loop_device: Some(o.path),
        })
        .collect();
    let state = if mounted && record.complete && attached == devices.len() {
        SandboxState::Up
    } else if mounted || attached > 0 || !extra_devices.is_empty() {
        SandboxState::Partial
    } else {
        SandboxState::Down
    };
    SandboxStatus {
        name: record.name.clone(),
        state,
        fs: record.fs,
        mount_point: record.mount_point.clone(),
        mounted,
        devices,
        size_bytes: record.size_bytes,
        data: record.data,
        metadata: record.metadata,
        made_by: record.made_by.clone(),
        extra_devices,
    }
}

#[cfg(test)]
mod down_tests {
    use super::*;
    use crate::sandbox::plan::{SandboxRequest, plan_up};
    use crate::ui::{RecordingUi, Said};

    fn store_with(names: &[&str]) -> (tempfile::TempDir, StateStore) {
        let t = tempfile::tempdir().unwrap();
        let store = StateStore::new(t.path().join("state"));
        for n in names {
            let plan = plan_up(&SandboxRequest::default(), Path::new("/var/tmp/x"), n).unwrap();
            store.create(&SandboxRecord::new(&plan)).unwrap();
        }
        (t, store)
    }

    /// The job shows its plan and asks through the Ui; refused, it removes
    /// nothing (the record stays). A dry run says nothing and returns the plan.
    #[test]
    fn down_asks_through_the_ui_and_a_refusal_removes_nothing() {
        let (_t, store) = store_with(&["s1"]);
        let ui = RecordingUi::new();
        let req = DownRequest {
            target: Some("s1"),
            ..DownRequest::default()
        };
        let describe = |plans: &[DownPlan]| format!("{} to remove\n", plans.len());
        let e = down(&store, &req, &ui, &describe).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Refused);
        assert_eq!(
            ui.said(),
            vec![
                Said::Say("1 to remove\n".into()),
                Said::Confirm("Remove sandbox s1?".into(), false),
            ]
        );
        assert!(store.has_record_file("s1").unwrap());

        let ui = RecordingUi::new();
        let dry = DownRequest {
            all: true,
            dry_run: true,
            ..DownRequest::default()
        };
        match down(&store, &dry, &ui, &describe).unwrap() {
            DownOutcome::DryRun(d) => {
                assert!(d.dry_run);
                assert_eq!(d.sandboxes.len(), 1);
                assert_eq!(d.sandboxes[0].name, "s1");
            }
            other => panic!("not a dry run: {other:?}"),
        }
        assert_eq!(ui.said(), Vec::new());
        assert!(store.has_record_file("s1").unwrap());
    }

    /// A record file that is not a record is an error said through the Ui,
    /// never acted on; `--all` then ends with status 1 and nothing removed.
    #[test]
    fn down_all_says_each_bad_record_and_fails() {
        let (t, store) = store_with(&[]);
        std::os::unix::fs::DirBuilderExt::mode(&mut std::fs::DirBuilder::new(), 0o700)
            .create(t.path().join("state"))
            .unwrap();
        std::fs::write(t.path().join("state/x.json"), "{garbage").unwrap();
        let ui = RecordingUi::new();
        let req = DownRequest {
            all: true,
            yes: true,
            ..DownRequest::default()
        };
        match down(&store, &req, &ui, &|_| String::new()).unwrap() {
            DownOutcome::Done {
                result,
                selected,
                status,
            } => {
                assert!(result.removed.is_empty());
                assert_eq!(selected, 0);
                assert_eq!(status, exit::ERROR);
            }
            other => panic!("not done: {other:?}"),
        }
        let said = ui.said();
        assert_eq!(said.len(), 1, "{said:?}");
        assert!(
            matches!(&said[0], Said::Error(m) if m.contains("x.json is not a sandbox record")),
            "{said:?}"
        );
        assert!(t.path().join("state/x.json").exists());
    }
}
