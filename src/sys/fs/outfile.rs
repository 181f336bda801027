//! Output files root writes where a user said (`man --out-dir DIR`,
//! `doctor --textfile FILE`, later `bench --report`/`--save-jobs`): the
//! directory is opened once with the link rule of
//! [`HeldDir`](crate::sys::fs::beneath::HeldDir) (walked from `/` without following
//! a link another user planted) and every file is written by descriptor
//! inside it: the new content goes to an anonymous `O_TMPFILE` (or, where
//! the filesystem has none, a new `O_CREAT | O_EXCL | O_NOFOLLOW` file)
//! with a name unique to this run (`.NAME.PID.NONCE.tmp`), which is then
//! renamed over `NAME` with `renameat` in the held directory. A reader
//! (node_exporter's textfile collector) sees the old file or the new one,
//! never half of one; a symbolic link or a hard link someone put at `NAME`
//! is replaced, never written through; and a run killed before the rename
//! leaves at most one temporary name, which the next run removes
//! ([`OutputDir::remove_stale_temps`]).

use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io::Write;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

use rustix::fs::{self as rfs, AtFlags, FileType, Mode, OFlags, ResolveFlags};
use rustix::io::Errno as RErrno;

use crate::error::{Error, ErrorKind, Result};
use crate::sys::fs::beneath::HeldDir;

fn err(e: RErrno, doing: &str, path: &Path) -> Error {
    crate::sys::kernel::errno::to_error(e, doing, path)
}

/// A user-named output directory, held by descriptor.
#[derive(Debug)]
pub struct OutputDir {
    dir: HeldDir,
}

/// Checks that `name` is one plain path component.
fn plain(name: &OsStr) -> Result<&OsStr> {
    let b = name.as_bytes();
    if b.is_empty() || b == b"." || b == b".." || b.contains(&b'/') || b.contains(&0) {
        return Err(Error::usage(format!(
            "'{}' is not a plain file name",
            name.to_string_lossy()
        )));
    }
    Ok(name)
}

/// `openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS)` of one component, or
/// `openat(O_NOFOLLOW)` before Linux 5.6.
fn open_beneath(
    dir: std::os::fd::BorrowedFd<'_>,
    name: &OsStr,
    flags: OFlags,
    mode: Mode,
) -> rustix::io::Result<OwnedFd> {
    let flags = flags | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    match rfs::openat2(
        dir,
        name,
        flags,
        mode,
        ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS,
    ) {
        Err(RErrno::NOSYS) => rfs::openat(dir, name, flags, mode),
        other => other,
    }
}

/// The temporary name of a run for `name`: `.NAME.PID.NONCE.tmp`.
fn temp_name(name: &OsStr) -> OsString {
    let mut t = OsString::from(".");
    t.push(name);
    t.push(format!(
        ".{}.{}.tmp",
        std::process::id(),
        crate::sys::fs::nonce::nonce()
    ));
    t
}

/// The pid in a temporary name of `name` (`.NAME.PID.tmp` of older
/// versions, `.NAME.PID.NONCE.tmp`), if `entry` is one.
fn temp_pid(name: &OsStr, entry: &OsStr) -> Option<i32> {
    let e = entry.as_bytes();
    let n = name.as_bytes();
    let rest = e.strip_prefix(b".")?.strip_prefix(n)?.strip_prefix(b".")?;
    let middle = rest.strip_suffix(b".tmp")?;
    let middle = std::str::from_utf8(middle).ok()?;
    let (pid, nonce) = match middle.split_once('.') {
        Some((p, n)) => (p, Some(n)),
        None => (middle, None),
    };
    if pid.is_empty() || !pid.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    if let Some(n) = nonce
        && (n.is_empty() || !n.bytes().all(|b| b.is_ascii_hexdigit()))
    {
        return None;
    }
    pid.parse().ok().filter(|p| *p > 0)
}

/// True when no process has this pid (any more).
fn is_dead(pid: i32) -> bool {
    match rustix::process::Pid::from_raw(pid) {
        Some(p) => rustix::process::test_kill_process(p) == Err(RErrno::SRCH),
        None => false,
    }
}

impl OutputDir {
    /// Opens the existing directory `path` (see [`HeldDir::open`]).
    pub fn open(path: &Path) -> Result<OutputDir> {
        HeldDir::open(path).map(|dir| OutputDir { dir })
    }

    /// Like [`OutputDir::open`], making the missing directories on the way
    /// (mode `mode`, less the umask), each inside the held one above it.
    pub fn create(path: &Path, mode: u32) -> Result<OutputDir> {
        match HeldDir::open(path) {
            Ok(dir) => return Ok(OutputDir { dir }),
            Err(e) if e.kind() == ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
        let abs = std::path::absolute(path)
            .map_err(|e| Error::usage(format!("invalid directory {}: {e}", path.display())))?;
        let (Some(parent), Some(Component::Normal(name))) =
            (abs.parent(), abs.components().next_back())
        else {
            return Err(Error::new(
                ErrorKind::NotFound,
                format!("{} does not exist", path.display()),
            ));
        };
        let parent = OutputDir::create(parent, mode)?;
        match rfs::mkdirat(parent.dir.fd(), name, Mode::from_raw_mode(mode)) {
            Ok(()) | Err(RErrno::EXIST) => {}
            Err(e) => return Err(err(e, "cannot create the directory", path)),
        }
        parent.dir.open_subdir(name).map(|dir| OutputDir { dir })
    }

    /// The path it was reached by (for messages).
    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Writes `bytes` as the file `name` of this directory, replacing it
    /// atomically (see the module documentation), with exactly `mode`.
    /// Returns the path written (for messages). On failure nothing new is
    /// left and `name` is as it was.
    pub fn write(&self, name: impl AsRef<OsStr>, bytes: &[u8], mode: u32) -> Result<PathBuf> {
        let name = plain(name.as_ref())?;
        let path = self.dir.join(name);
        let tmp = temp_name(name);
        let mut made = false;
        let result = self
            .write_temp(&tmp, &path, bytes, mode, &mut made)
            .and_then(|()| {
                rfs::renameat(self.dir.fd(), &tmp, self.dir.fd(), name)
                    .map_err(|e| err(e, "cannot write", &path))
            });
        if result.is_err() && made {
            let _ = rfs::unlinkat(self.dir.fd(), &tmp, AtFlags::empty());
        }
        result.map(|()| path)
    }

    /// The new content under the temporary name `tmp`: an `O_TMPFILE`
    /// written, synced and then linked (nothing is left if the run dies
    /// before the link), or a new file made with `O_EXCL`.
    fn write_temp(
        &self,
        tmp: &OsStr,
        path: &Path,
        bytes: &[u8],
        mode: u32,
        made: &mut bool,
    ) -> Result<()> {
        let m = Mode::from_raw_mode(mode);
        let fill = |fd: &OwnedFd| -> Result<()> {
            rfs::fchmod(fd, m).map_err(|e| err(e, "cannot write", path))?;
            let mut f = File::from(
                fd.try_clone()
                    .map_err(|e| Error::from_io(&e, "cannot write", path))?,
            );
            f.write_all(bytes)
                .and_then(|()| f.sync_all())
                .map_err(|e| Error::from_io(&e, "cannot write", path))
        };
        match rfs::openat(
            self.dir.fd(),
            ".",
            OFlags::TMPFILE | OFlags::WRONLY | OFlags::CLOEXEC,
            m,
        ) {
            Ok(fd) => {
                fill(&fd)?;
                let linked = match rfs::linkat(&fd, "", self.dir.fd(), tmp, AtFlags::EMPTY_PATH) {
                    // AT_EMPTY_PATH needs CAP_DAC_READ_SEARCH before 6.10.
                    Err(RErrno::NOENT | RErrno::PERM) => {
                        let proc_path =
                            format!("/proc/self/fd/{}", std::os::fd::AsRawFd::as_raw_fd(&fd));
                        rfs::linkat(
                            rfs::CWD,
                            proc_path.as_str(),
                            self.dir.fd(),
                            tmp,
                            AtFlags::SYMLINK_FOLLOW,
                        )
                    }
                    other => other,
                };
                linked.map_err(|e| err(e, "cannot write", path))?;
                *made = true;
                Ok(())
            }
            // No O_TMPFILE here (older kernels, some filesystems).
            Err(RErrno::OPNOTSUPP | RErrno::ISDIR | RErrno::INVAL | RErrno::NOENT) => {
                let fd = open_beneath(
                    self.dir.fd(),
                    tmp,
                    OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL,
                    m,
                )
                .map_err(|e| err(e, "cannot write", path))?;
                *made = true;
                fill(&fd)
            }
            Err(e) => Err(err(e, "cannot write", path)),
        }
    }

    /// Writes `bytes` into the existing regular file `name` in place
    /// (truncated first): for when a new file cannot be made (a full
    /// filesystem), so that what a collector reads is at least not the old
    /// content. Never follows a link; refuses anything but a regular file
    /// with a single link, owned by the running user.
    pub(crate) fn rewrite_in_place(
        &self,
        name: impl AsRef<OsStr>,
        bytes: &[u8],
    ) -> Result<PathBuf> {
        let name = plain(name.as_ref())?;
        let path = self.dir.join(name);
        let fd = open_beneath(
            self.dir.fd(),
            name,
            OFlags::WRONLY | OFlags::NONBLOCK | OFlags::NOCTTY,
            Mode::empty(),
        )
        .map_err(|e| err(e, "cannot rewrite", &path))?;
        let st = rfs::fstat(&fd).map_err(|e| err(e, "cannot stat", &path))?;
        let me = rustix::process::geteuid().as_raw();
        if FileType::from_raw_mode(st.st_mode) != FileType::RegularFile
            || st.st_nlink != 1
            || st.st_uid != me
        {
            return Err(Error::new(
                ErrorKind::WrongTarget,
                format!(
                    "{} is not a regular file of ours (owner uid {}, {} links): not rewritten",
                    path.display(),
                    st.st_uid,
                    st.st_nlink
                ),
            ));
        }
        rfs::ftruncate(&fd, 0).map_err(|e| err(e, "cannot rewrite", &path))?;
        let mut f = File::from(fd);
        f.write_all(bytes)
            .and_then(|()| f.sync_all())
            .map_err(|e| Error::from_io(&e, "cannot rewrite", &path))?;
        Ok(path)
    }

    /// Removes the temporary files of `name` that runs which are no longer
    /// alive left behind (a SIGKILL between the link and the rename, or
    /// older versions' `.NAME.PID.tmp`): only regular files of the running
    /// user with one link, whose pid is dead. Returns the names removed.
    pub(crate) fn remove_stale_temps(&self, name: impl AsRef<OsStr>) -> Result<Vec<OsString>> {
        let name = plain(name.as_ref())?;
        let me = rustix::process::geteuid().as_raw();
        let mut removed = Vec::new();
        for entry in self.dir.names()? {
            let Some(pid) = temp_pid(name, &entry) else {
                continue;
            };
            if pid == std::process::id() as i32 || !is_dead(pid) {
                continue;
            }
            let Some(st) = self.dir.stat(&entry)? else {
                continue;
            };
            if FileType::from_raw_mode(st.st_mode) != FileType::RegularFile
                || st.st_uid != me
                || st.st_nlink != 1
            {
                continue;
            }
            match rfs::unlinkat(self.dir.fd(), &entry, AtFlags::empty()) {
                Ok(()) => removed.push(entry),
                Err(RErrno::NOENT) => {}
                Err(e) => return Err(err(e, "cannot delete", &self.dir.join(&entry))),
            }
        }
        Ok(removed)
    }

    /// The descriptor of the directory (for checks such as fstatfs).
    pub fn fd(&self) -> std::os::fd::BorrowedFd<'_> {
        self.dir.fd()
    }
}

/// Writes `bytes` to the file `path` (its directory must exist), replacing
/// it atomically with exactly `mode`; stale temporary files of dead runs
/// are removed first. The one way for root to write a file a user named.
#[cfg_attr(not(test), allow(dead_code))] // used by the unit tests
pub(crate) fn write_output_file(path: &Path, bytes: &[u8], mode: u32) -> Result<()> {
    let (dir, name) = split(path)?;
    let dir = OutputDir::open(&dir)?;
    let _ = dir.remove_stale_temps(&name);
    dir.write(&name, bytes, mode).map(|_| ())
}

/// `path` as its directory and its file name.
pub fn split(path: &Path) -> Result<(PathBuf, OsString)> {
    let name = match path.components().next_back() {
        Some(Component::Normal(n)) => n.to_os_string(),
        _ => {
            return Err(Error::usage(format!(
                "{} is not a file name",
                path.display()
            )));
        }
    };
    let dir = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."))
        .to_path_buf();
    Ok((dir, name))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }

    #[test]
    fn temp_names_are_recognised() {
        let n = OsStr::new("btrfs.prom");
        assert_eq!(temp_pid(n, OsStr::new(".btrfs.prom.123.tmp")), Some(123));
        assert_eq!(
            temp_pid(n, OsStr::new(".btrfs.prom.123.3f9a1c.tmp")),
            Some(123)
        );
        assert_eq!(
            temp_pid(n, OsStr::new(&temp_name(n))),
            Some(std::process::id() as i32)
        );
        for other in [
            "btrfs.prom",
            ".btrfs.prom.tmp",
            ".btrfs.prom..tmp",
            ".btrfs.prom.12x.tmp",
            ".btrfs.prom.12.zz.tmp",
            ".other.prom.12.tmp",
            ".btrfs.prom.0.tmp",
        ] {
            assert_eq!(temp_pid(n, OsStr::new(other)), None, "{other}");
        }
        assert_ne!(temp_name(n), temp_name(n), "unique per call");
    }

    #[test]
    fn replaces_atomically_and_leaves_nothing() {
        let t = tempfile::tempdir().unwrap();
        let p = t.path().join("x.prom");
        write_output_file(&p, b"a 1\n", 0o644).unwrap();
        write_output_file(&p, b"a 2\n", 0o644).unwrap();
        assert_eq!(std::fs::read_to_string(&p).unwrap(), "a 2\n");
        assert_eq!(names(t.path()), ["x.prom"]);
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(
            std::fs::metadata(&p).unwrap().permissions().mode() & 0o7777,
            0o644
        );
        assert!(write_output_file(&t.path().join("nope/x.prom"), b"", 0o644).is_err());
    }

    #[test]
    fn a_link_at_the_name_is_replaced_not_followed() {
        let t = tempfile::tempdir().unwrap();
        let victim = t.path().join("victim");
        std::fs::write(&victim, "keep\n").unwrap();
        let page = t.path().join("page.1");
        std::os::unix::fs::symlink(&victim, &page).unwrap();
        write_output_file(&page, b".TH X 1\n", 0o644).unwrap();
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "keep\n");
        assert!(!std::fs::symlink_metadata(&page).unwrap().is_symlink());
        assert_eq!(names(t.path()), ["page.1", "victim"]);
    }

    #[test]
    fn stale_temps_of_dead_runs_go_and_live_ones_stay() {
        let t = tempfile::tempdir().unwrap();
        // A pid that is not running: a child that has been reaped.
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let dead = child.id();
        child.wait().unwrap();
        let me = std::process::id();
        for n in [
            format!(".x.prom.{dead}.tmp"),
            format!(".x.prom.{dead}.abc123.tmp"),
            format!(".x.prom.{me}.abc123.tmp"),
            format!(".y.prom.{dead}.tmp"),
        ] {
            std::fs::write(t.path().join(n), "old").unwrap();
        }
        let d = OutputDir::open(t.path()).unwrap();
        let mut removed: Vec<String> = d
            .remove_stale_temps("x.prom")
            .unwrap()
            .into_iter()
            .map(|n| n.to_string_lossy().into_owned())
            .collect();
        removed.sort();
        assert_eq!(
            removed,
            [
                format!(".x.prom.{dead}.abc123.tmp"),
                format!(".x.prom.{dead}.tmp")
            ]
        );
        assert_eq!(
            names(t.path()),
            [
                format!(".x.prom.{me}.abc123.tmp"),
                format!(".y.prom.{dead}.tmp")
            ]
        );
    }

    #[test]
    fn create_makes_missing_directories() {
        let t = tempfile::tempdir().unwrap();
        let deep = t.path().join("a/b/c");
        let d = OutputDir::create(&deep, 0o755).unwrap();
        d.write("p.1", b"x", 0o644).unwrap();
        assert_eq!(std::fs::read_to_string(deep.join("p.1")).unwrap(), "x");
        // Existing: opened as it is.
        OutputDir::create(&deep, 0o755).unwrap();
    }

    #[test]
    fn rewrite_in_place_overwrites_a_regular_file_only() {
        let t = tempfile::tempdir().unwrap();
        std::fs::write(t.path().join("x.prom"), "a long healthy file\n").unwrap();
        let d = OutputDir::open(t.path()).unwrap();
        d.rewrite_in_place("x.prom", b"ok 0\n").unwrap();
        assert_eq!(
            std::fs::read_to_string(t.path().join("x.prom")).unwrap(),
            "ok 0\n"
        );
        std::os::unix::fs::symlink("x.prom", t.path().join("l.prom")).unwrap();
        assert!(d.rewrite_in_place("l.prom", b"no\n").is_err());
        assert!(d.rewrite_in_place("missing.prom", b"no\n").is_err());
    }
}
