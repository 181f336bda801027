//! Carrying out the steps of a plan, file by file, so that an interruption
//! at any point loses nothing.
//!
//! A migration copies the file into a new NOCOW file in the same directory
//! and renames that over the original. The copy is an unnamed O_TMPFILE
//! while it is written (a crash leaves nothing behind); it gets a name with
//! btrfs-lab's prefix, and the marker attribute that proves it is ours, only
//! once it is complete, verified and flushed; the rename that replaces the
//! original is atomic. Until that rename the original is untouched. A re-run
//! removes a leftover (prefix and marker) and carries on.

use std::collections::HashMap;
use std::ffi::{OsStr, OsString};
use std::fs::{File, Permissions};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, Weak};
use std::thread;
use std::time::{Duration, Instant};

use crate::sys::fs::migrate::{self as fsm, DirLock, FileStat, MigrateErrno as Errno};
use serde::{Deserialize, Serialize};

use super::{MARKER_XATTR, TEMP_PREFIX};
use crate::error::{Error, ErrorKind, Result};
use crate::hooks::Pause;
use crate::sys::block::loopdev::FileIdentity;
use crate::sys::fs::filecopy::{
    self, Compared, Verified, compare_contents, copy_data, copy_verified, create_unnamed,
    drop_cached_pages, link_into,
};
use crate::sys::fs::filesystem;
use crate::sys::kernel::ioctl::{
    FS_COMPR_FL, FS_NOATIME_FL, FS_NOCOMP_FL, FS_NOCOW_FL, FS_NODUMP_FL, FS_SYNC_FL, IFlags,
};
use crate::sys::kernel::lease::{self, Lease, LeaseKind};
use crate::sys::{kernel::signals, kernel::xattrs, proc::procs};

/// Inode flags a migrated file keeps (besides NOCOW). Compression cannot be
/// combined with NOCOW; immutable and append-only files are not migrated.
const KEPT_FLAGS: IFlags = FS_NOATIME_FL
    .union(FS_NODUMP_FL)
    .union(FS_SYNC_FL)
    .union(FS_NOCOMP_FL);

/// How steps are carried out. Shared by the threads that migrate files at
/// once ([`crate::nocow::plan::Plan::parallel_migrations`]).
#[derive(Debug)]
pub struct ExecOptions {
    /// Migrate files that a process has open.
    pub force: bool,
    /// The existing directory the plan is about (its canonical path), held
    /// open since it was walked; every step opens its directory from it.
    pub root: Option<(PathBuf, std::sync::Arc<super::scan::DirHandle>)>,
    /// Directories this run created, and their identities.
    pub created: Vec<(PathBuf, FileIdentity)>,
    /// The files the run migrates, for one walk of /proc that covers them
    /// all ([`Self::set_migrating`]).
    migrating: Vec<(FileIdentity, PathBuf)>,
    /// The last walk of /proc over `migrating`, and when it was made.
    openers: Mutex<Option<(Instant, procs::OpenFiles)>>,
    /// The directories files are migrated in now, locked once for all the
    /// files being migrated in each ([`Self::lock_dir`]).
    locked: Mutex<HashMap<FileIdentity, Weak<DirLock>>>,
}

/// How long one walk of /proc answers "who has it open" for the files it
/// covered: long enough that a run of many small files walks /proc about
/// once a second instead of once a file (a walk reads every process's
/// descriptors and mappings, tens of milliseconds), short enough that every
/// file is looked at within a second of its copy. Writers who open a file
/// after the walk are caught by the lease and the comparison, as before.
const OPENERS_FRESH: Duration = Duration::from_secs(1);

impl ExecOptions {
    /// Options.
    pub fn new(force: bool) -> Self {
        Self {
            force,
            root: None,
            created: Vec::new(),
            migrating: Vec::new(),
            openers: Mutex::new(None),
            locked: Mutex::new(HashMap::new()),
        }
    }

    /// The files this run will migrate: one walk of /proc looks for all of
    /// them ([`OPENERS_FRESH`]).
    pub(crate) fn set_migrating(&mut self, files: Vec<(FileIdentity, PathBuf)>) {
        self.migrating = files;
        *self.openers.get_mut().unwrap_or_else(|e| e.into_inner()) = None;
    }

    /// Who has `id` open, from a walk of /proc made at most
    /// [`OPENERS_FRESH`] ago that covered it (else a new one).
    fn openers_now(&self, id: FileIdentity, path: &Path) -> Vec<procs::Opener> {
        let mut openers = self.openers.lock().unwrap_or_else(|e| e.into_inner());
        let covered = self.migrating.iter().any(|(i, _)| *i == id);
        let fresh = openers
            .as_ref()
            .is_some_and(|(at, _)| at.elapsed() < OPENERS_FRESH);
        if !(covered && fresh) {
            let mut targets = self.migrating.clone();
            if !covered {
                targets.push((id, path.to_path_buf()));
            }
            *openers = Some((Instant::now(), procs::open_files(&targets)));
        }
        openers
            .as_ref()
            .map(|(_, found)| found.openers(id).to_vec())
            .unwrap_or_default()
    }

    /// The directory `dir` (opened from the held tree), locked against
    /// another btrfs-lab working in it: this run's lock on it when another
    /// of its files is being migrated now (an flock is per opened
    /// directory, so a second one of this run would refuse the first), a new
    /// one otherwise. The lock goes when the last file using it is done.
    fn lock_dir(&self, dir: File, dir_path: &Path) -> Result<Arc<DirLock>> {
        let id = FileIdentity::of(&dir).map_err(|e| Error::from_io(&e, "cannot stat", dir_path))?;
        let mut locked = self.locked.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(held) = locked.get(&id).and_then(Weak::upgrade) {
            return Ok(held);
        }
        let held = Arc::new(lock_dir(dir, dir_path)?);
        locked.retain(|_, w| w.strong_count() > 0);
        locked.insert(id, Arc::downgrade(&held));
        Ok(held)
    }

    /// The test hook at `point` ([`crate::hooks`]): waits for a signal
    /// when a test asked for it.
    fn pause_at(&self, point: Pause, path: &Path) -> Result<()> {
        point.here(&format!(" of {}", path.display()), &|| false)
    }
}

/// One migrated file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Migrated {
    /// Absolute path.
    #[serde(serialize_with = "crate::report::text::lossy_path")]
    pub path: PathBuf,
    /// Its size.
    pub size_bytes: u64,
    /// Bytes allocated before (the original).
    pub allocated_before_bytes: u64,
    /// Bytes allocated after (the NOCOW copy): holes stay holes.
    pub allocated_after_bytes: u64,
    /// Data bytes copied (holes are skipped).
    pub copied_bytes: u64,
    /// BLAKE3 of the content, the same for original and copy (both read back).
    pub blake3: String,
    /// Extended attributes carried over.
    pub xattrs: usize,
    /// The original had the compression attribute, which NOCOW excludes.
    pub compression_dropped: bool,
}

/// The parent directory and the name of `path`.
fn split(path: &Path) -> Result<(&Path, &OsStr)> {
    match (path.parent(), path.file_name()) {
        (Some(p), Some(n)) => Ok((p, n)),
        _ => Err(Error::new(
            ErrorKind::WrongTarget,
            format!("{} has no parent directory", path.display()),
        )),
    }
}

/// The directory of `path`, opened and locked against another btrfs-lab
/// working in it (the lock goes with the process, SIGKILL included).
fn lock_dir(f: File, dir: &Path) -> Result<DirLock> {
    fsm::try_lock_dir(f, dir)?.ok_or_else(|| {
        Error::new(
            ErrorKind::Busy,
            format!("another btrfs-lab is migrating files in {}", dir.display()),
        )
        .with_hint("wait for it to finish, then run again")
    })
}

fn stat_at(dir: &File, name: &OsStr, dir_path: &Path) -> Result<FileStat> {
    fsm::stat_at(dir, name, &dir_path.join(name))
}

fn identity(st: &FileStat) -> FileIdentity {
    FileIdentity {
        dev: st.st_dev,
        ino: st.st_ino,
    }
}

fn changed(path: &Path) -> Error {
    Error::new(
        ErrorKind::State,
        format!(
            "{} changed since it was planned; it was left as it is",
            path.display()
        ),
    )
    .with_hint("run the command again to plan with what is there now")
}

/// Opens `name` in `dir` for reading without following a link, and checks it
/// is still the planned file.
fn open_planned(dir: &File, dir_path: &Path, name: &OsStr, id: FileIdentity) -> Result<File> {
    let path = dir_path.join(name);
    // O_NOATIME keeps the original's atime as it was.
    let file = fsm::open_keeping_atime(dir, name, &path)?;
    let meta = file
        .metadata()
        .map_err(|e| Error::from_io(&e, "cannot stat", &path))?;
    if !meta.is_file() || meta.dev() != id.dev || meta.ino() != id.ino {
        return Err(changed(&path));
    }
    Ok(file)
}

/// Removes a temporary file an interrupted migration left, after checking
/// it is still that file and still carries the marker (or is the swapped-out
/// original the audit identified).
pub(crate) fn remove_leftover(dir: File, path: &Path, id: FileIdentity) -> Result<()> {
    let (dir_path, name) = split(path)?;
    if !name.to_string_lossy().starts_with(TEMP_PREFIX) {
        return Err(changed(path));
    }
    let dir = lock_dir(dir, dir_path)?;
    let file = open_planned(&dir, dir_path, name, id)?;
    // Ours: a copy with the marker, or an original swapped out under a
    // temporary name carrying its own inode number (the audit found its
    // verified copy in place).
    let swapped_out = super::scan::temp_name_ino(name) == Some(id.ino);
    if !swapped_out && xattrs::get(&file, path, MARKER_XATTR)?.is_none() {
        return Err(changed(path));
    }
    fsm::unlink_file(&dir, name, "cannot remove", path)?;
    filecopy::sync(&dir, dir_path)
}

/// Removes the marker attribute from a migrated file.
pub(crate) fn clear_marker(dir: File, path: &Path, id: FileIdentity) -> Result<()> {
    let (dir_path, name) = split(path)?;
    let dir = lock_dir(dir, dir_path)?;
    let file = open_planned(&dir, dir_path, name, id)?;
    xattrs::remove(&file, path, MARKER_XATTR)?;
    filecopy::sync(&file, path)
}

/// Sets NOCOW on a file that is still empty.
pub(crate) fn switch_empty(dir: File, path: &Path, id: FileIdentity) -> Result<()> {
    let (dir_path, name) = split(path)?;
    let dir = lock_dir(dir, dir_path)?;
    let file = open_planned(&dir, dir_path, name, id)?;
    if file
        .metadata()
        .map_err(|e| Error::from_io(&e, "cannot stat", path))?
        .len()
        != 0
    {
        return Err(changed(path));
    }
    filesystem::set_nocow(&file, path, true)
}

/// The copy while it is made: removed on drop unless committed.
struct TempCopy<'a> {
    file: File,
    dir: &'a File,
    name: Option<OsString>,
    committed: bool,
}

impl Drop for TempCopy<'_> {
    fn drop(&mut self) {
        if !self.committed
            && let Some(name) = &self.name
        {
            let _ = fsm::unlink_file(self.dir, name, "cannot remove", Path::new(name));
        }
    }
}

fn openers_of(opts: &ExecOptions, id: FileIdentity, path: &Path) -> Result<()> {
    if opts.force {
        return Ok(());
    }
    let who = opts.openers_now(id, path);
    if who.is_empty() {
        return Ok(());
    }
    Err(Error::new(
        ErrorKind::Busy,
        format!(
            "{} is open by {}; it was left as it is",
            path.display(),
            procs::describe(&who)
        ),
    )
    .with_hint(
        "stop the process and run again (--include-open migrates anyway; its later writes are lost)",
    ))
}

/// Migrates one file. `Ok(None)` when there is nothing to do any more (it
/// became NOCOW meanwhile). `progress` gets the bytes copied and hashed.
///
/// The copy is made and verified first; only then is the original put under
/// a read lease, compared with the copy once more (stat and content), and
/// swapped with it. A writer who opens the original after that breaks the
/// lease and the swap does not happen (or is undone); a writer who changed
/// it before makes the comparison fail. Either way the file is copied again
/// (a few times), then refused, and nothing it wrote is lost.
pub(crate) fn migrate_file(
    dir: File,
    path: &Path,
    id: FileIdentity,
    opts: &ExecOptions,
    progress: &mut dyn FnMut(u64) -> Result<()>,
) -> Result<Option<Migrated>> {
    let (dir_path, name) = split(path)?;
    let dir = opts.lock_dir(dir, dir_path)?;
    let src = open_planned(&dir, dir_path, name, id)?;
    let src_flags = filesystem::inode_flags_of(&src, path)?.unwrap_or(IFlags::empty());
    if src_flags.intersects(FS_NOCOW_FL) {
        return Ok(None);
    }
    let links = fsm::stat_of(&src, path)?.st_nlink;
    if links > 1 {
        return Err(changed(path));
    }
    // Nobody may have it open (the plan looked before; a walk of /proc made
    // at most OPENERS_FRESH ago covers the time since). The lease below
    // covers writers from then on.
    openers_of(opts, id, path)?;
    let file = Planned {
        dir: &dir,
        dir_path,
        name,
        path,
        id,
        src: &src,
        src_flags,
    };
    let mut attempt = 1;
    loop {
        match file.attempt(opts, progress) {
            Ok(m) => return Ok(Some(m)),
            Err(Attempt::Again(_)) if attempt < ATTEMPTS => {
                attempt += 1;
                signals::check()?;
            }
            Err(Attempt::Again(e) | Attempt::Fail(e)) => return Err(e),
        }
    }
}

/// Copies made of a file that is written to meanwhile, before it is refused.
const ATTEMPTS: u32 = 3;

/// Why an attempt failed: the file changed (try again), or anything else.
enum Attempt {
    Again(Error),
    Fail(Error),
}

impl From<Error> for Attempt {
    fn from(e: Error) -> Self {
        Attempt::Fail(e)
    }
}

/// The file being migrated, opened.
struct Planned<'a> {
    dir: &'a File,
    dir_path: &'a Path,
    name: &'a OsStr,
    path: &'a Path,
    id: FileIdentity,
    src: &'a File,
    src_flags: IFlags,
}

impl Planned<'_> {
    fn attempt(
        &self,
        opts: &ExecOptions,
        progress: &mut dyn FnMut(u64) -> Result<()>,
    ) -> std::result::Result<Migrated, Attempt> {
        let (src, path) = (self.src, self.path);
        let before = fsm::stat_of(src, path)?;
        let size = u64::try_from(before.st_size).unwrap_or(0);
        let (mut tmp, tmp_path) = self.unnamed_copy()?;
        let (verified, copied) = self.copy_data(opts, &before, (&tmp.file, &tmp_path), progress)?;
        let (src_xattrs, compression_dropped) =
            self.copy_metadata(&tmp.file, &tmp_path, &before)?;
        let (src_lease, got) = match verified {
            Some((src_lease, _, hash)) => (src_lease, hash),
            None => self.lease_and_compare(opts, &before, (&tmp.file, &tmp_path), progress)?,
        };
        self.swap(opts, &mut tmp, src_lease)?;
        let copy_meta = self.check_swapped(&tmp.file)?;
        Ok(Migrated {
            path: path.to_path_buf(),
            size_bytes: size,
            allocated_before_bytes: u64::try_from(before.st_blocks).unwrap_or(0) * 512,
            allocated_after_bytes: copy_meta.blocks() * 512,
            copied_bytes: copied,
            blake3: got.to_hex().to_string(),
            xattrs: src_xattrs.len(),
            compression_dropped,
        })
    }

    /// Step 1: An empty NOCOW file nobody else can see. No named copy ever
    /// exists without the marker: the copy is an O_TMPFILE until it is
    /// complete and marked; without O_TMPFILE (never on btrfs since Linux
    /// 3.16) nothing is migrated.
    fn unnamed_copy(&self) -> std::result::Result<(TempCopy<'_>, PathBuf), Attempt> {
        let (dir, dir_path, path) = (self.dir, self.dir_path, self.path);
        let Some(file) = create_unnamed(dir, dir_path)? else {
            return Err(Attempt::Fail(
                Error::new(
                    ErrorKind::Unsupported,
                    format!(
                        "cannot migrate {}: the filesystem does not support O_TMPFILE, which the copy needs so that no named copy exists without its marker",
                        path.display()
                    ),
                )
                .with_hint("use a kernel with O_TMPFILE on btrfs (Linux 3.16 or later)"),
            ));
        };
        let tmp = TempCopy {
            file,
            dir,
            name: None,
            committed: false,
        };
        let tmp_path = dir_path.join(format!("{TEMP_PREFIX}{}", self.id.ino));
        filesystem::set_nocow(&tmp.file, &tmp_path, true)?;
        // Reading the copy back must not change the access time it gets.
        filecopy::read_without_atime(&tmp.file, &tmp_path)?;
        Ok((tmp, tmp_path))
    }

    /// Step 2: The data, holes kept. A large file is copied under the
    /// original's lease and verified as it is copied ([`copy_verified`]:
    /// each chunk read back from the disk and compared with the original's
    /// bytes as read), so the original is read once; the lease intact to
    /// the end proves nobody could have written to it since. A smaller file
    /// (or one without O_DIRECT, or with --include-open) is copied first and
    /// compared whole under the lease afterwards (4.). Returns the verified
    /// copy's lease and hash, if it was, and the bytes copied.
    #[allow(clippy::type_complexity)]
    fn copy_data(
        &self,
        opts: &ExecOptions,
        before: &FileStat,
        (tmp, tmp_path): (&File, &Path),
        progress: &mut dyn FnMut(u64) -> Result<()>,
    ) -> std::result::Result<(Option<(Option<Lease<'_>>, u64, blake3::Hash)>, u64), Attempt> {
        let (src, path) = (self.src, self.path);
        let size = u64::try_from(before.st_size).unwrap_or(0);
        let mut first_chunk = true;
        let mut ticks = |n| {
            signals::check()?;
            progress(n)?;
            if first_chunk {
                first_chunk = false;
                opts.pause_at(Pause::NocowCopy, path)?;
            }
            Ok(())
        };
        let mut verified: Option<(Option<Lease<'_>>, u64, blake3::Hash)> = None;
        if size >= filecopy::LARGE && !opts.force {
            let src_lease = lease_original(src, path, false)?;
            still_what_was_planned(src, before, path)?;
            let lease = src_lease.as_ref();
            match copy_verified(
                src,
                path,
                tmp,
                tmp_path,
                size,
                &mut || still_unwritten(lease, path),
                &mut ticks,
            ) {
                Ok(Verified::Same { copied, hash }) => verified = Some((src_lease, copied, hash)),
                Ok(Verified::DifferAt(at)) => return Err(Attempt::Again(differs(path, at))),
                Err(e) if e.kind() == ErrorKind::Unsupported => {}
                Err(e) if matches!(e.kind(), ErrorKind::State | ErrorKind::Busy) => {
                    return Err(Attempt::Again(e));
                }
                Err(e) => return Err(Attempt::Fail(e)),
            }
        }
        let copied = match &verified {
            Some((_, copied, _)) => *copied,
            None => {
                copy_data(src, path, tmp, tmp_path, size, &mut ticks).map_err(|e| {
                    match e.kind() {
                        // Shorter than it was: written to meanwhile.
                        ErrorKind::State => Attempt::Again(e),
                        _ => Attempt::Fail(e),
                    }
                })?
            }
        };
        Ok((verified, copied))
    }

    /// Step 3: Owner, attributes, mode, flags, times: in this order, because
    /// chown clears file capabilities and setting an ACL changes the mode.
    /// Then data and metadata are flushed at once (one fsync), and the
    /// metadata is read back (the copy is read with O_NOATIME, so reading
    /// it back below keeps the access time just set). Returns the
    /// attributes copied, and whether compression was dropped.
    fn copy_metadata(
        &self,
        tmp: &File,
        tmp_path: &Path,
        before: &FileStat,
    ) -> std::result::Result<(xattrs::Xattrs, bool), Attempt> {
        let (src, path) = (self.src, self.path);
        std::os::unix::fs::fchown(tmp, Some(before.st_uid), Some(before.st_gid)).map_err(|e| {
            Error::from_io(&e, "cannot give the copy the owner of", path)
                .with_hint("run as root to migrate files of other users")
        })?;
        let src_xattrs: xattrs::Xattrs = xattrs::read_all(src, path)?
            .into_iter()
            .filter(|(n, _)| n != MARKER_XATTR && !n.to_string_lossy().starts_with("btrfs."))
            .collect();
        let compression_dropped = self.src_flags.intersects(FS_COMPR_FL)
            || xattrs::get(src, path, "btrfs.compression")?.is_some();
        copy_xattrs(&src_xattrs, tmp, path)?;
        tmp.set_permissions(Permissions::from_mode(before.st_mode & 0o7777))
            .map_err(|e| Error::from_io(&e, "cannot set the mode of the copy of", path))?;
        let flags = (self.src_flags & KEPT_FLAGS) | FS_NOCOW_FL;
        filesystem::set_inode_flags_of(tmp, tmp_path, flags)?;
        fsm::set_times_of(tmp, before, "cannot set the times of the copy of", path)?;
        filecopy::sync(tmp, tmp_path)?;
        verify_metadata(tmp, before, flags, &src_xattrs, path)?;
        Ok((src_xattrs, compression_dropped))
    }

    /// Step 4: The original under a lease: from now on nobody can open it for
    /// writing without us knowing. It must still be what was copied: the
    /// same size and times, and the same content as the copy, both read in
    /// full after the lease (so nothing written before it is missed) and
    /// compared byte for byte: the copy back from the disk (its cached
    /// pages dropped; holes as zeros, so a wrong SEEK_DATA answer would
    /// show), hashed (BLAKE3) on a second thread meanwhile. (A large file
    /// was verified so while it was copied, under its lease: 2.)
    fn lease_and_compare(
        &self,
        opts: &ExecOptions,
        before: &FileStat,
        (tmp, tmp_path): (&File, &Path),
        progress: &mut dyn FnMut(u64) -> Result<()>,
    ) -> std::result::Result<(Option<Lease<'_>>, blake3::Hash), Attempt> {
        let (src, path) = (self.src, self.path);
        let size = u64::try_from(before.st_size).unwrap_or(0);
        let src_lease = lease_original(src, path, opts.force)?;
        still_what_was_planned(src, before, path)?;
        drop_cached_pages(tmp);
        let compared = compare_contents(tmp, tmp_path, src, path, size, &mut |n| {
            signals::check()?;
            progress(n)
        })
        .map_err(|e| match e.kind() {
            ErrorKind::State => Attempt::Again(changed_while_copied(path)),
            _ => Attempt::Fail(e),
        })?;
        match compared {
            Compared::Same(hash) => Ok((src_lease, hash)),
            Compared::DifferAt(at) => Err(Attempt::Again(differs(path, at))),
        }
    }

    /// Step 5: Still unwritten and still the planned file: a name (with the
    /// marker), then the swap.
    fn swap(
        &self,
        opts: &ExecOptions,
        tmp: &mut TempCopy<'_>,
        src_lease: Option<Lease<'_>>,
    ) -> std::result::Result<(), Attempt> {
        let Planned {
            dir,
            dir_path,
            name,
            path,
            id,
            ..
        } = *self;
        still_unwritten(src_lease.as_ref(), path).map_err(Attempt::Again)?;
        if identity(&stat_at(dir, name, dir_path)?) != id {
            return Err(Attempt::Fail(changed(path)));
        }
        if tmp.name.is_none() {
            set_marker(tmp, id, path)?;
            let n = format!("{TEMP_PREFIX}{}-{}", id.ino, crate::sys::fs::nonce::nonce());
            link_into(&tmp.file, dir, dir_path, &n)?;
            tmp.name = Some(n.into());
        }
        opts.pause_at(Pause::NocowLinked, path)?;
        signals::check()?;
        swap_in(tmp, dir, dir_path, name, path, id, src_lease.as_ref(), opts)?;
        drop(src_lease);
        // The marker goes; the swap, the removal and this are made durable
        // for all the run's files at once by one commit at the end
        // ([`crate::nocow::execute`]). Until then a crash leaves one of the
        // states a re-run completes: the copy under its temporary name with
        // the marker (removed), the original swapped out with its copy in
        // place (removed), or the copy in place with the marker (cleared).
        xattrs::remove(&tmp.file, path, MARKER_XATTR)?;
        Ok(())
    }

    /// Step 6: The name now holds the NOCOW copy; its metadata.
    fn check_swapped(&self, copy: &File) -> std::result::Result<std::fs::Metadata, Attempt> {
        let path = self.path;
        let final_stat = stat_at(self.dir, self.name, self.dir_path)?;
        let copy_meta = copy
            .metadata()
            .map_err(|e| Error::from_io(&e, "cannot stat", path))?;
        let final_flags = filesystem::inode_flags_of(copy, path)?.unwrap_or(IFlags::empty());
        if final_stat.st_ino != copy_meta.ino() || !final_flags.intersects(FS_NOCOW_FL) {
            return Err(Attempt::Fail(Error::new(
                ErrorKind::State,
                format!("{} is not the NOCOW copy after the rename", path.display()),
            )));
        }
        Ok(copy_meta)
    }
}

/// `Err(Again)` unless `src` still has the size and times of `before`
/// (taken before the copy): what a write since would have changed.
fn still_what_was_planned(
    src: &File,
    before: &FileStat,
    path: &Path,
) -> std::result::Result<(), Attempt> {
    let now = fsm::stat_of(src, path)?;
    let same = now.st_size == before.st_size
        && (now.st_mtime, now.st_mtime_nsec) == (before.st_mtime, before.st_mtime_nsec)
        && (now.st_ctime, now.st_ctime_nsec) == (before.st_ctime, before.st_ctime_nsec);
    if same {
        Ok(())
    } else {
        Err(Attempt::Again(changed_while_copied(path)))
    }
}

/// The copy of `path` read back differently from byte `at` on.
fn differs(path: &Path, at: u64) -> Error {
    Error::new(
        ErrorKind::Io,
        format!(
            "the copy of {} does not match the original (from byte {at} on); the original was left as it is",
            path.display(),
        ),
    )
    .with_hint(
        "if nothing writes to it, check the filesystem (btrfs device stats, dmesg) \
         before trying again",
    )
}

fn changed_while_copied(path: &Path) -> Error {
    Error::new(
        ErrorKind::State,
        format!(
            "{} changed while it was copied; it was left as it is",
            path.display()
        ),
    )
    .with_hint("stop whatever writes to it and run again")
}

/// How long the original stays under its lease after the swap, before it
/// is removed: an open() that looked the name up just before the swap has
/// this long to reach the lease and break it.
const SWAP_GRACE: Duration = Duration::from_millis(20);

/// Attempts at the lease while a writer has the original open for a moment.
const LEASE_TRIES: u32 = 10;

fn written_meanwhile(path: &Path) -> Error {
    Error::new(
        ErrorKind::Busy,
        format!(
            "{} was opened for writing while it was migrated; it was left as it is",
            path.display()
        ),
    )
    .with_hint("stop whatever writes to it and run again")
}

/// A read lease on the original, so that a writer who opens it later is
/// noticed. A writer who has it open now is waited for a moment (one that
/// opens, writes and closes), then refused; with `--force` the migration
/// goes on without the lease.
fn lease_original<'a>(src: &'a File, path: &Path, force: bool) -> Result<Option<Lease<'a>>> {
    let mut tries = 0;
    loop {
        match lease::take(src, LeaseKind::Read) {
            Ok(l) => return Ok(Some(l)),
            Err(Errno::EAGAIN) if tries + 1 < LEASE_TRIES => {
                tries += 1;
                signals::check()?;
                thread::sleep(Duration::from_millis(5));
            }
            Err(_) if force => return Ok(None),
            Err(Errno::EAGAIN) => {
                return Err(Error::new(
                    ErrorKind::Busy,
                    format!(
                        "{} is open for writing by a running process; it was left as it is",
                        path.display()
                    ),
                )
                .with_hint(
                    "stop the process and run again (--include-open migrates anyway; its later writes are lost)",
                ));
            }
            Err(e) => {
                return Err(
                    Error::from_errno(e, "cannot take a lease on", path).with_hint(
                        "without a lease a writer could slip in unnoticed; check \
                     /proc/sys/fs/leases-enable (--include-open migrates without it)",
                    ),
                );
            }
        }
    }
}

/// `Err` once someone opened the original for writing.
fn still_unwritten(lease: Option<&Lease<'_>>, path: &Path) -> Result<()> {
    match lease {
        Some(l) if !l.intact() => Err(written_meanwhile(path)),
        _ => Ok(()),
    }
}

/// Swaps the complete copy (named `tmp.name`) and the original (`name`)
/// with one RENAME_EXCHANGE, so the original keeps a name until the end.
/// Then, after [`SWAP_GRACE`], it is removed only if nobody opened it for
/// writing meanwhile and the name swapped out is really the original;
/// otherwise the swap is undone and the file is refused. A writer waiting
/// on the broken lease goes on once we let go, into the original, under its
/// own name again.
#[allow(clippy::too_many_arguments)] // the state of one swap, and the test hook
fn swap_in(
    tmp: &mut TempCopy<'_>,
    dir: &File,
    dir_path: &Path,
    name: &OsStr,
    path: &Path,
    id: FileIdentity,
    src_lease: Option<&Lease<'_>>,
    opts: &ExecOptions,
) -> std::result::Result<(), Attempt> {
    let temp_name = tmp.name.clone().unwrap_or_default();
    // Anyone who opens the copy once it has the name breaks this one.
    let copy_lease = match lease::take(&tmp.file, LeaseKind::Write) {
        Ok(l) => l,
        Err(Errno::EAGAIN) => {
            return Err(Attempt::Fail(written_meanwhile(&dir_path.join(&temp_name))));
        }
        Err(e) => {
            return Err(Error::from_errno(e, "cannot take a lease on the copy of", path).into());
        }
    };
    still_unwritten(src_lease, path).map_err(Attempt::Again)?;
    let exchange = |what: &str| fsm::exchange(dir, &temp_name, name, what, path);
    exchange("cannot swap the copy with")?;
    // The test hook waits for a SIGKILL here; a SIGINT, SIGTERM or SIGHUP
    // only ends the wait (this file is finished, the next check stops).
    let _ = opts.pause_at(Pause::NocowSwapped, path);
    thread::sleep(SWAP_GRACE);
    let original_out = stat_at(dir, &temp_name, dir_path).map(|st| identity(&st) == id);
    let copy_in = stat_at(dir, name, dir_path)
        .map(|st| st.st_ino == tmp.file.metadata().map(|m| m.ino()).unwrap_or(0));
    let written = src_lease.is_some_and(|l| !l.intact());
    if !written && matches!(original_out, Ok(true)) && matches!(copy_in, Ok(true)) {
        fsm::unlink_file(dir, &temp_name, "cannot remove the original of", path)?;
        tmp.committed = true;
        return Ok(());
    }
    // Undo: the original back under its name, the copy under the temporary
    // one, removed as usual (TempCopy) unless someone opened it meanwhile.
    if let Err(e) = exchange("cannot swap back the original of") {
        tmp.committed = true;
        return Err(Attempt::Fail(
            Error::new(
                e.kind(),
                format!(
                    "{}; the original is {} and the copy is {}",
                    e.message(),
                    dir_path.join(&temp_name).display(),
                    path.display()
                ),
            )
            .with_hint("rename the original back by hand (mv), then run again"),
        ));
    }
    if !copy_lease.intact() {
        // Someone opened the copy while it had the name and may write to it
        // once we let go: it stays, without the marker, so that a re-run
        // does not remove it.
        tmp.committed = true;
        xattrs::remove(&tmp.file, path, MARKER_XATTR)?;
        return Err(Attempt::Fail(
            Error::new(
                ErrorKind::Busy,
                format!(
                    "{} was opened by two processes while the copy was swapped in; the original \
                 was put back and the copy kept as {}",
                    path.display(),
                    dir_path.join(&temp_name).display()
                ),
            )
            .with_hint("stop whatever writes to it, compare the two files, then run again"),
        ));
    }
    if written {
        return Err(Attempt::Again(written_meanwhile(path)));
    }
    Err(Attempt::Fail(changed(path)))
}

fn set_marker(tmp: &mut TempCopy<'_>, id: FileIdentity, path: &Path) -> Result<()> {
    let value = format!(
        "btrfs-lab nocow: copy of inode {} by pid {}",
        id.ino,
        std::process::id()
    );
    xattrs::set(&tmp.file, path, OsStr::new(MARKER_XATTR), value.as_bytes())
}

/// Gives `dst` exactly the attributes `want` (plus the marker, if set):
/// attributes it got at creation (an inherited default ACL, a security
/// label) are removed where the kernel allows.
fn copy_xattrs(want: &xattrs::Xattrs, dst: &File, path: &Path) -> Result<()> {
    for (n, _) in xattrs::read_all(dst, path)? {
        if n != MARKER_XATTR && !want.iter().any(|(w, _)| *w == n) {
            let removed = xattrs::remove(dst, path, &n.to_string_lossy());
            if removed.is_err() && !n.to_string_lossy().starts_with("security.") {
                removed?;
            }
        }
    }
    for (n, v) in want {
        xattrs::set(dst, path, n, v)?;
    }
    Ok(())
}

fn verify_metadata(
    copy: &File,
    before: &FileStat,
    flags: IFlags,
    want: &xattrs::Xattrs,
    path: &Path,
) -> Result<()> {
    let m = copy
        .metadata()
        .map_err(|e| Error::from_io(&e, "cannot stat the copy of", path))?;
    let mut wrong = Vec::new();
    if m.mode() & 0o7777 != before.st_mode & 0o7777 {
        wrong.push("mode");
    }
    if (m.uid(), m.gid()) != (before.st_uid, before.st_gid) {
        wrong.push("owner");
    }
    if (m.mtime(), m.mtime_nsec()) != (before.st_mtime, before.st_mtime_nsec) {
        wrong.push("modification time");
    }
    if (m.atime(), m.atime_nsec()) != (before.st_atime, before.st_atime_nsec) {
        wrong.push("access time");
    }
    if !filesystem::inode_flags_of(copy, path)?
        .unwrap_or(IFlags::empty())
        .contains(flags)
    {
        wrong.push("attributes");
    }
    let have = xattrs::read_all(copy, path)?;
    if !want.iter().all(|w| have.contains(w)) {
        wrong.push("extended attributes");
    }
    if wrong.is_empty() {
        Ok(())
    } else {
        Err(Error::new(
            ErrorKind::State,
            format!(
                "the copy of {} did not keep its {}; the original was left as it is",
                path.display(),
                wrong.join(", ")
            ),
        ))
    }
}
