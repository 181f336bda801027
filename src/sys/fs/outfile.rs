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
//!
//! What is replaced is checked first ([`OutputDir::write`]): only a regular
//! file, or nothing, is ever renamed over (`doctor --textfile /dev/null` as
//! root must not turn the machine's `/dev/null` into a file; a FIFO, a
//! socket, a device node, a directory or a symbolic link at the name is
//! refused). And the directory, and the file being replaced, must be ones no
//! other user can change: owned by root (or the running user), writable by
//! nobody else (a sticky world-writable `/tmp` included), the rule of
//! [`check_dir`]; a user who means to write into someone else's directory
//! passes `--allow-untrusted-target` ([`OutputDir::allow_untrusted`]) and is
//! told why it was refused without it.

use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io::Write;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

use rustix::fs::{self as rfs, AtFlags, FileType, Mode, OFlags};
use rustix::io::Errno as RErrno;

use crate::error::{Error, ErrorKind, Result};
use crate::sys::fs::beneath::{HeldDir, Leaf, check_dir, component, open_beneath};

/// The flag that lets root write into a directory (or over a file) another
/// user can change; named in every refusal.
pub const ALLOW_UNTRUSTED_FLAG: &str = "--allow-untrusted-target";

fn err(e: RErrno, doing: &str, path: &Path) -> Error {
    crate::error::Error::from_errno(e, doing, path)
}

/// A user-named output directory, held by descriptor.
#[derive(Debug)]
pub struct OutputDir {
    dir: HeldDir,
    /// `--allow-untrusted-target`: skip the owner and mode checks (never
    /// the file-type check).
    allow_untrusted: bool,
}

/// "is owned by uid N (mode M)" or "is writable by other users (...)".
fn describe_owner(st: &rfs::Stat) -> String {
    let me = rustix::process::geteuid().as_raw();
    let mode = st.st_mode & 0o7777;
    if st.st_uid != 0 && st.st_uid != me {
        format!("is owned by uid {} (mode {mode:04o})", st.st_uid)
    } else {
        format!(
            "is writable by other users (owner uid {}, mode {mode:04o})",
            st.st_uid
        )
    }
}

/// What a file type is called in a refusal.
pub(crate) fn kind_name(kind: FileType) -> &'static str {
    match kind {
        FileType::RegularFile => "a regular file",
        FileType::Directory => "a directory",
        FileType::Symlink => "a symbolic link",
        FileType::Fifo => "a FIFO",
        FileType::Socket => "a socket",
        FileType::CharacterDevice => "a character device",
        FileType::BlockDevice => "a block device",
        FileType::Unknown => "of an unknown type",
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
    fn held(dir: HeldDir) -> OutputDir {
        OutputDir {
            dir,
            allow_untrusted: false,
        }
    }

    /// With `yes` (`--allow-untrusted-target`), [`OutputDir::write`] writes
    /// into a directory, or over a regular file, that another user owns or
    /// can write. A non-regular destination is refused all the same.
    pub fn allow_untrusted(mut self, yes: bool) -> OutputDir {
        self.allow_untrusted = yes;
        self
    }

    /// Whether `name` may be replaced: nothing there, or a regular file; and
    /// (without [`OutputDir::allow_untrusted`]) the directory and that file
    /// are not another user's to change. One line saying why otherwise.
    pub(crate) fn check_destination(&self, name: &OsStr) -> Result<()> {
        let path = self.dir.join(name);
        let untrusted = |why: String| {
            Error::new(
                ErrorKind::Permission,
                format!(
                    "not writing {}: {why}, so another user could change what is written there; pass {ALLOW_UNTRUSTED_FLAG} to write it anyway",
                    path.display()
                ),
            )
            .with_hint("write into a directory owned by root and writable only by root (install -d -o root -m 0755 DIR)")
        };
        if !self.allow_untrusted {
            let st = self.dir.fstat()?;
            check_dir(&st, self.dir.path(), Leaf::Private).map_err(|_| {
                untrusted(format!(
                    "its directory {} {}",
                    self.dir.path().display(),
                    describe_owner(&st)
                ))
            })?;
        }
        let Some(st) = self.dir.stat(name)? else {
            return Ok(());
        };
        let kind = FileType::from_raw_mode(st.st_mode);
        if kind != FileType::RegularFile {
            return Err(Error::new(
                ErrorKind::WrongTarget,
                format!(
                    "not writing {}: it is {}, not a regular file, and btrfs-lab replaces only regular files",
                    path.display(),
                    kind_name(kind)
                ),
            )
            .with_hint("name a new file or an existing regular file"));
        }
        let me = rustix::process::geteuid().as_raw();
        if !self.allow_untrusted && ((st.st_uid != 0 && st.st_uid != me) || st.st_mode & 0o022 != 0)
        {
            return Err(untrusted(format!("the file {}", describe_owner(&st))));
        }
        Ok(())
    }

    /// Opens the existing directory `path` (see [`HeldDir::open`]).
    pub fn open(path: &Path) -> Result<OutputDir> {
        HeldDir::open(path).map(OutputDir::held)
    }

    /// Like [`OutputDir::open`], making the missing directories on the way
    /// (mode `mode`, less the umask), each inside the held one above it.
    pub fn create(path: &Path, mode: u32) -> Result<OutputDir> {
        match HeldDir::open(path) {
            Ok(dir) => return Ok(OutputDir::held(dir)),
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
        parent.dir.open_subdir(name).map(OutputDir::held)
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
        let name = component(name.as_ref())?;
        self.check_destination(name)?;
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
        let name = component(name.as_ref())?;
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
        let name = component(name.as_ref())?;
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
    fn a_link_at_the_name_is_refused_not_followed() {
        let t = tempfile::tempdir().unwrap();
        let victim = t.path().join("victim");
        std::fs::write(&victim, "keep\n").unwrap();
        let page = t.path().join("page.1");
        std::os::unix::fs::symlink(&victim, &page).unwrap();
        let e = write_output_file(&page, b".TH X 1\n", 0o644).unwrap_err();
        assert!(
            e.message()
                .contains("it is a symbolic link, not a regular file"),
            "{}",
            e.message()
        );
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "keep\n");
        assert!(std::fs::symlink_metadata(&page).unwrap().is_symlink());
        assert_eq!(names(t.path()), ["page.1", "victim"]);
    }

    #[test]
    fn only_a_regular_file_is_replaced() {
        let t = tempfile::tempdir().unwrap();
        let d = OutputDir::open(t.path()).unwrap().allow_untrusted(true);
        rfs::mknodat(
            rfs::CWD,
            t.path().join("fifo"),
            FileType::Fifo,
            Mode::from_raw_mode(0o600),
            0,
        )
        .unwrap();
        std::fs::create_dir(t.path().join("dir")).unwrap();
        for (name, what) in [("fifo", "a FIFO"), ("dir", "a directory")] {
            let e = d.write(name, b"x 1\n", 0o644).unwrap_err();
            assert_eq!(e.kind(), ErrorKind::WrongTarget);
            assert!(
                e.message()
                    .contains(&format!("it is {what}, not a regular file")),
                "{}",
                e.message()
            );
        }
        assert_eq!(
            rfs::lstat(t.path().join("fifo")).unwrap().st_mode & libc_ifmt(),
            FileType::Fifo.as_raw_mode()
        );
        assert_eq!(names(t.path()), ["dir", "fifo"]);
        d.write("new.prom", b"x 1\n", 0o644).unwrap();
        d.write("new.prom", b"x 2\n", 0o644).unwrap();
    }

    fn libc_ifmt() -> u32 {
        0o170000
    }

    #[test]
    fn a_directory_others_can_write_is_refused_unless_allowed() {
        use std::os::unix::fs::PermissionsExt;
        let t = tempfile::tempdir().unwrap();
        for mode in [0o777, 0o1777, 0o775] {
            std::fs::set_permissions(t.path(), std::fs::Permissions::from_mode(mode)).unwrap();
            let e = write_output_file(&t.path().join("x.prom"), b"x 1\n", 0o644).unwrap_err();
            assert_eq!(e.kind(), ErrorKind::Permission);
            let m = e.message();
            assert!(m.contains("is writable by other users"), "{m}");
            assert!(m.contains(&format!("mode {mode:04o}")), "{m}");
            assert!(m.contains(ALLOW_UNTRUSTED_FLAG), "{m}");
            assert!(!m.contains('\n'), "one line: {m}");
            assert_eq!(names(t.path()), Vec::<String>::new());
            OutputDir::open(t.path())
                .unwrap()
                .allow_untrusted(true)
                .write("x.prom", b"x 1\n", 0o644)
                .unwrap();
            std::fs::remove_file(t.path().join("x.prom")).unwrap();
        }
        std::fs::set_permissions(t.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        // A file others can write is refused too.
        let p = t.path().join("x.prom");
        std::fs::write(&p, "old\n").unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o666)).unwrap();
        let e = write_output_file(&p, b"x 1\n", 0o644).unwrap_err();
        assert!(
            e.message().contains("the file is writable by other users"),
            "{}",
            e.message()
        );
        assert_eq!(std::fs::read_to_string(&p).unwrap(), "old\n");
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
