//! A root prefix for every sysfs and procfs read, so tests (and users
//! looking at a captured tree) can point the readers at a fixture, and the
//! one reader of their attribute files.
//!
//! A captured tree may come from anyone: the reader never follows a
//! symbolic link in the last component (an attribute file is a file, in
//! sysfs as in procfs), resolves the directory links of the tree inside the
//! prefix (`openat2(RESOLVE_IN_ROOT)`, else canonicalize + prefix check),
//! opens with `O_NONBLOCK` (a FIFO cannot hang it), reads regular files
//! only (`fstat` after the open) and at most a cap of bytes.

use std::fs::File;
use std::io::{self, Read};
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

use rustix::fs::{Mode, OFlags, ResolveFlags};

/// Largest sysfs attribute read (sysfs hands out at most a page; 64 KiB
/// leaves room for binary attributes and captured trees).
pub(crate) const ATTR_CAP: usize = 64 << 10;
/// Largest procfs table read (`mountinfo`, `diskstats`, `vmstat`,
/// `meminfo`): thousands of mounts still fit.
pub(crate) const TABLE_CAP: usize = 16 << 20;

/// Environment variable that sets the default root prefix.
pub(crate) const SYSROOT_ENV: &str = "BTRFS_LAB_SYSROOT";

/// Where `/sys` and `/proc` are read from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SysRoot {
    prefix: PathBuf,
}

impl SysRoot {
    /// The running system (`/`).
    pub fn host() -> Self {
        Self::new("/")
    }

    /// A tree under `prefix` laid out like `/` (`prefix/sys`, `prefix/proc`).
    pub fn new(prefix: impl Into<PathBuf>) -> Self {
        Self {
            prefix: prefix.into(),
        }
    }

    /// `--sysroot` if given, else `$BTRFS_LAB_SYSROOT`, else `/`. As root
    /// the environment variable is ignored (a note through `ui` says so): an
    /// environment that `sudo` or a service kept must not point a root
    /// process at a tree someone else wrote; root gives `--sysroot`.
    pub fn from_option(opt: Option<&Path>, ui: &dyn crate::ui::Ui) -> Self {
        let (root, note) = Self::choose(
            opt,
            std::env::var_os(SYSROOT_ENV).as_deref(),
            rustix::process::geteuid().is_root(),
        );
        if let Some(n) = note {
            ui.note(&n);
        }
        root
    }

    /// What [`SysRoot::from_option`] picks, and the note it prints.
    pub(crate) fn choose(
        opt: Option<&Path>,
        env: Option<&std::ffi::OsStr>,
        is_root: bool,
    ) -> (Self, Option<String>) {
        match (opt, env) {
            (Some(p), _) => (Self::new(p), None),
            (None, Some(e)) if !e.is_empty() => {
                if is_root {
                    (
                        Self::host(),
                        Some(format!(
                            "{SYSROOT_ENV} is ignored when running as root; give --sysroot {} to read that tree",
                            Path::new(e).display()
                        )),
                    )
                } else {
                    (Self::new(PathBuf::from(e)), None)
                }
            }
            _ => (Self::host(), None),
        }
    }

    /// True when reading the running system.
    pub(crate) fn is_host(&self) -> bool {
        self.prefix == Path::new("/")
    }

    /// The prefix itself.
    pub fn prefix(&self) -> &Path {
        &self.prefix
    }

    /// `<prefix>/sys/<rel>`.
    pub fn sys(&self, rel: &str) -> PathBuf {
        self.prefix.join("sys").join(rel.trim_start_matches('/'))
    }

    /// `<prefix>/proc/<rel>`.
    pub fn proc(&self, rel: &str) -> PathBuf {
        self.prefix.join("proc").join(rel.trim_start_matches('/'))
    }

    /// Reads a sysfs attribute at `path` (under the prefix), at most
    /// [`ATTR_CAP`] bytes. See the module documentation for what is
    /// refused.
    pub(crate) fn read_attr(&self, path: &Path) -> io::Result<String> {
        self.read_text(path, ATTR_CAP)
    }

    /// Reads a procfs table at `path` (under the prefix), at most
    /// [`TABLE_CAP`] bytes.
    pub(crate) fn read_table(&self, path: &Path) -> io::Result<String> {
        self.read_text(path, TABLE_CAP)
    }

    /// [`SysRoot::read_bytes`] as text (invalid UTF-8 replaced).
    pub(crate) fn read_text(&self, path: &Path, cap: usize) -> io::Result<String> {
        let bytes = self.read_bytes(path, cap)?;
        Ok(String::from_utf8(bytes)
            .unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned()))
    }

    /// Reads the file at `path`, which must lie under the prefix, as the
    /// module documentation says: at most `cap` bytes (more is an error).
    pub fn read_bytes(&self, path: &Path, cap: usize) -> io::Result<Vec<u8>> {
        let file = self.open_file(path)?;
        let mut out = Vec::new();
        file.take(cap as u64 + 1).read_to_end(&mut out)?;
        if out.len() > cap {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("larger than {} KiB", cap >> 10),
            ));
        }
        Ok(out)
    }

    /// Opens `path` (under the prefix) for reading as
    /// [`SysRoot::read_bytes`] does, for a file read again and again
    /// (`/proc/vmstat`): a regular file, or an error.
    pub(crate) fn open_file(&self, path: &Path) -> io::Result<File> {
        let file = File::from(self.open_attr(path)?);
        if !file.metadata()?.is_file() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "not a regular file",
            ));
        }
        Ok(file)
    }

    /// Opens `path` for reading without following a link in its last
    /// component, its directories resolved inside the prefix.
    fn open_attr(&self, path: &Path) -> io::Result<OwnedFd> {
        let outside = || io::Error::new(io::ErrorKind::PermissionDenied, "outside the root prefix");
        // Paths are built from the prefix, or are canonical ones of the
        // tree (resolved directory links).
        let canonical;
        let rel = match path.strip_prefix(&self.prefix) {
            Ok(r) => r,
            Err(_) => {
                canonical = std::fs::canonicalize(&self.prefix)?;
                path.strip_prefix(&canonical).map_err(|_| outside())?
            }
        };
        if rel.as_os_str().is_empty() {
            return Err(outside());
        }
        let flags =
            OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC | OFlags::NOCTTY;
        let dir = rustix::fs::open(
            &self.prefix,
            OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )?;
        match rustix::fs::openat2(
            &dir,
            rel,
            flags,
            Mode::empty(),
            ResolveFlags::IN_ROOT | ResolveFlags::NO_MAGICLINKS,
        ) {
            Err(rustix::io::Errno::NOSYS) | Err(rustix::io::Errno::PERM) => {}
            r => return r.map_err(io::Error::from),
        }
        // Before Linux 5.6 (or where seccomp refuses openat2): resolve the
        // directories and check they stay under the prefix.
        let (Some(parent), Some(name)) = (path.parent(), path.file_name()) else {
            return Err(outside());
        };
        let real = std::fs::canonicalize(parent)?;
        if !real.starts_with(std::fs::canonicalize(&self.prefix)?) {
            return Err(outside());
        }
        Ok(rustix::fs::open(real.join(name), flags, Mode::empty())?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    #[test]
    fn the_environment_is_ignored_as_root() {
        let env = Some(std::ffi::OsStr::new("/fx"));
        let (r, note) = SysRoot::choose(None, env, false);
        assert_eq!(r, SysRoot::new("/fx"));
        assert_eq!(note, None);
        let (r, note) = SysRoot::choose(None, env, true);
        assert!(r.is_host());
        let note = note.unwrap();
        assert!(
            note.contains("BTRFS_LAB_SYSROOT is ignored when running as root"),
            "{note}"
        );
        assert!(note.contains("--sysroot /fx"), "{note}");
        let (r, note) = SysRoot::choose(Some(Path::new("/cli")), env, true);
        assert_eq!((r, note), (SysRoot::new("/cli"), None));
        let (r, note) = SysRoot::choose(None, Some(std::ffi::OsStr::new("")), false);
        assert_eq!((r.is_host(), note), (true, None));
    }

    #[test]
    fn attributes_are_bounded_regular_files_inside_the_prefix() {
        let outside = tempfile::tempdir_in("/var/tmp").unwrap();
        let secret = outside.path().join("secret");
        std::fs::write(&secret, "top secret\n").unwrap();
        let t = tempfile::tempdir_in("/var/tmp").unwrap();
        let root = SysRoot::new(t.path());
        let dev = t.path().join("sys/devices/x");
        std::fs::create_dir_all(&dev).unwrap();
        std::fs::create_dir_all(t.path().join("sys/class")).unwrap();
        symlink("../devices/x", t.path().join("sys/class/x")).unwrap();
        symlink(outside.path(), t.path().join("sys/class/out")).unwrap();
        std::fs::write(dev.join("model"), "Drive\n").unwrap();
        std::fs::write(dev.join("big"), vec![b'a'; ATTR_CAP + 1]).unwrap();
        symlink("/dev/zero", dev.join("zero")).unwrap();
        symlink(&secret, dev.join("secret")).unwrap();
        rustix::fs::mknodat(
            rustix::fs::CWD,
            dev.join("fifo"),
            rustix::fs::FileType::Fifo,
            Mode::from_raw_mode(0o600),
            0,
        )
        .unwrap();
        // A directory link inside the tree is followed.
        assert_eq!(
            root.read_attr(&root.sys("class/x/model")).unwrap(),
            "Drive\n"
        );
        assert_eq!(root.read_attr(&dev.join("model")).unwrap(), "Drive\n");
        // Links in the last component, FIFOs, big files: refused.
        for name in ["zero", "secret", "fifo", "big"] {
            assert!(root.read_attr(&dev.join(name)).is_err(), "{name}");
        }
        assert!(root.read_bytes(&dev.join("big"), ATTR_CAP + 1).is_ok());
        // A directory link that leaves the prefix is resolved inside it
        // (RESOLVE_IN_ROOT) or refused: never the file outside.
        assert!(root.read_attr(&root.sys("class/out/secret")).is_err());
        assert!(
            root.read_attr(&secret).is_err(),
            "a path outside the prefix"
        );
        assert!(
            root.read_attr(&root.sys("../../../../../../etc/hostname"))
                .is_err()
        );
    }

    #[test]
    fn joins_under_the_prefix() {
        let r = SysRoot::new("/fx");
        assert_eq!(r.sys("/block/loop0"), PathBuf::from("/fx/sys/block/loop0"));
        assert_eq!(r.proc("vmstat"), PathBuf::from("/fx/proc/vmstat"));
        assert!(SysRoot::host().is_host());
        assert_eq!(
            SysRoot::host().proc("vmstat"),
            PathBuf::from("/proc/vmstat")
        );
    }
}
