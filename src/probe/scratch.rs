//! The probe's scratch entries: test files and the NOCOW control directory,
//! all created relative to the probed directory's descriptor (opened once),
//! removed on drop; and the removal of what a killed probe left behind.
//!
//! Names carry the pid of the probe that made them:
//! `.btrfs-lab-probe-<pid>-<6 hex>-r<round>.test` and
//! `.btrfs-lab-probe-<pid>-<6 hex>.nocow/r<round>.control`. A later probe
//! removes an entry only when its name has that form, its pid is not a
//! running process, it belongs to the user running the probe (root for
//! root), and it is a regular file, or a directory holding nothing but such
//! control files.

use std::ffi::OsStr;
use std::fs::File;
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::sys::block::loopdev::FileIdentity;
use crate::sys::fs::beneath::HeldDir;
use crate::sys::fs::scratch::{self as at, EntryKind, pid_alive};
use crate::sys::kernel::direct_io::create_direct_at;

/// Every scratch name starts so.
pub(crate) const PREFIX: &str = ".btrfs-lab-probe-";

/// What a scratch name is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// `...-r<round>.test`, a test file.
    TestFile,
    /// `....nocow`, the control directory.
    ControlDir,
}

fn is_nonce(s: &str) -> bool {
    s.len() == 6 && s.bytes().all(|b| b.is_ascii_hexdigit())
}

fn is_number(s: &str) -> bool {
    !s.is_empty() && s.len() <= 10 && s.bytes().all(|b| b.is_ascii_digit())
}

/// The pid and kind a scratch name carries; `None` for any other name.
pub(crate) fn parse_name(name: &str) -> Option<(u32, Kind)> {
    let rest = name.strip_prefix(PREFIX)?;
    let (pid, rest) = rest.split_once('-')?;
    if !is_number(pid) {
        return None;
    }
    let pid: u32 = pid.parse().ok().filter(|&p| p > 0)?;
    if let Some(nonce) = rest.strip_suffix(".nocow") {
        return is_nonce(nonce).then_some((pid, Kind::ControlDir));
    }
    let (nonce, round) = rest.split_once("-r")?;
    let round = round.strip_suffix(".test")?;
    (is_nonce(nonce) && is_number(round)).then_some((pid, Kind::TestFile))
}

/// True for `r<round>.control`, a file of a control directory.
pub(crate) fn is_control_file_name(name: &str) -> bool {
    name.strip_prefix('r')
        .and_then(|r| r.strip_suffix(".control"))
        .is_some_and(is_number)
}

/// The scratch name prefix of this run: `.btrfs-lab-probe-<pid>-<nonce>`.
pub fn tag(pid: u32, nonce: &str) -> String {
    format!("{PREFIX}{pid}-{nonce}")
}

/// Scratch entries of one run, removed on drop (so on every exit path:
/// errors, SIGINT/SIGTERM/SIGHUP handled as errors, panics). The probed
/// directory is held ([`HeldDir`]: another user may own it), the control
/// directory is made private in it ([`HeldDir::mkdir_private`]), and every
/// entry is removed only while it is still the one made (device, inode).
pub(crate) struct Scratch {
    held: HeldDir,
    dir: File,
    shown: PathBuf,
    control: Option<(String, File, FileIdentity)>,
    /// (in the control directory, name, identity).
    files: Vec<(bool, String, FileIdentity)>,
}

impl Scratch {
    /// Scratch entries in the held directory `dir`.
    pub fn new(held: HeldDir) -> Result<Self> {
        Ok(Self {
            dir: held.file()?,
            shown: held.path().to_path_buf(),
            held,
            control: None,
            files: Vec::new(),
        })
    }

    /// Where `name` is shown (in the control directory or not).
    pub fn shown(&self, in_control: bool, name: &str) -> PathBuf {
        match (&self.control, in_control) {
            (Some((c, _, _)), true) => self.shown.join(c).join(name),
            _ => self.shown.join(name),
        }
    }

    /// Creates the control directory `name` (ours alone, mode 0700) and
    /// opens it.
    pub(crate) fn make_control_dir(&mut self, name: &str) -> Result<&File> {
        let made = self.held.mkdir_private(name, 0o700)?;
        let id = made.identity()?;
        let file = made.open_dir_file()?;
        self.control = Some((name.to_owned(), file, id));
        Ok(&self.control.as_ref().expect("just set").1)
    }

    fn parent(&self, in_control: bool) -> &File {
        match (&self.control, in_control) {
            (Some((_, c, _)), true) => c,
            _ => &self.dir,
        }
    }

    /// Creates the O_DIRECT test file `name` (O_EXCL, O_NOFOLLOW, 0600).
    pub fn create(&mut self, in_control: bool, name: &str) -> Result<File> {
        let shown = self.shown(in_control, name);
        let f = create_direct_at(self.parent(in_control), name, &shown)?;
        let id = FileIdentity::of(&f).map_err(|e| Error::from_io(&e, "cannot stat", &shown))?;
        self.files.push((in_control, name.to_owned(), id));
        Ok(f)
    }

    /// Unlinks `name` if it still is `id`.
    fn unlink_own(&self, in_control: bool, name: &str, id: FileIdentity) -> Result<()> {
        let parent = self.parent(in_control);
        match at::stat_at(parent, OsStr::new(name)) {
            Ok(st) if crate::sys::fs::beneath::identity_of(&st) == id => {}
            Ok(_) => return Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) => {
                return Err(Error::from_io(
                    &e,
                    "cannot remove test file",
                    &self.shown(in_control, name),
                ));
            }
        }
        at::unlink_at(parent, OsStr::new(name)).map_err(|e| {
            Error::from_io(&e, "cannot remove test file", &self.shown(in_control, name))
        })
    }

    /// Removes a file made by [`Scratch::create`].
    pub fn remove(&mut self, in_control: bool, name: &str) -> Result<()> {
        if let Some(&(_, _, id)) = self
            .files
            .iter()
            .find(|(c, n, _)| *c == in_control && n == name)
        {
            self.unlink_own(in_control, name, id)?;
        }
        self.files
            .retain(|(c, n, _)| !(*c == in_control && n == name));
        Ok(())
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        for (in_control, name, id) in std::mem::take(&mut self.files) {
            let _ = self.unlink_own(in_control, &name, id);
        }
        if let Some((name, dir, id)) = self.control.take() {
            drop(dir);
            let _ = self.held.remove_empty_dir(name.as_str(), id);
        }
    }
}

/// A regular file (not followed through a link) owned by `uid`.
fn is_own_file(dir: &File, name: &OsStr, uid: u32) -> bool {
    at::stat_at(dir, name).is_ok_and(|st| at::kind_of(&st) == EntryKind::File && st.st_uid == uid)
}

/// Removes a dead probe's control directory: only when it is a directory
/// of ours holding nothing but control files of ours. True when removed.
fn remove_control_dir(dir: &File, name: &OsStr, uid: u32) -> bool {
    let Ok(st) = at::stat_at(dir, name) else {
        return false;
    };
    if at::kind_of(&st) != EntryKind::Dir || st.st_uid != uid {
        return false;
    }
    let Ok(sub) = at::open_subdir_nofollow(dir, name) else {
        return false;
    };
    let Ok(entries) = at::entry_names(&sub) else {
        return false;
    };
    let mut files = Vec::new();
    for n in entries {
        let Ok(n) = n else { return false };
        if !n.to_str().is_some_and(is_control_file_name) || !is_own_file(&sub, &n, uid) {
            return false;
        }
        files.push(n);
    }
    for n in files {
        if at::unlink_at(&sub, &n).is_err() {
            return false;
        }
    }
    at::rmdir_at(dir, name).is_ok()
}

/// Removes what killed probes left in `dir` (see the module documentation).
/// Returns the names removed, sorted.
pub(crate) fn remove_stale(dir: &File) -> Vec<String> {
    let uid = crate::sys::euid();
    let me = std::process::id();
    let Ok(entries) = at::entry_names(dir) else {
        return Vec::new();
    };
    let mut removed = Vec::new();
    for name in entries.flatten() {
        let Ok(name) = name.into_string() else {
            continue;
        };
        let Some((pid, kind)) = parse_name(&name) else {
            continue;
        };
        if pid == me || pid_alive(pid) {
            continue;
        }
        let os = OsStr::new(&name);
        let done = match kind {
            Kind::TestFile => is_own_file(dir, os, uid) && at::unlink_at(dir, os).is_ok(),
            Kind::ControlDir => remove_control_dir(dir, os, uid),
        };
        if done {
            removed.push(name);
        }
    }
    removed.sort();
    removed
}

/// The device (`major:minor`) and inode of an open directory.
pub fn identity(dir: &File) -> Result<(String, u64)> {
    let st = at::stat_fd(dir).map_err(|e| Error::from_io(&e, "cannot stat", Path::new(".")))?;
    let (major, minor) = at::major_minor(st.st_dev);
    Ok((format!("{major}:{minor}"), st.st_ino))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_parsed_strictly() {
        assert_eq!(
            parse_name(".btrfs-lab-probe-1234-a0b1c2.nocow"),
            Some((1234, Kind::ControlDir))
        );
        assert_eq!(
            parse_name(".btrfs-lab-probe-7-abcdef-r12.test"),
            Some((7, Kind::TestFile))
        );
        assert_eq!(
            parse_name(&format!("{}-r0.test", tag(99, "00ff00"))),
            Some((99, Kind::TestFile))
        );
        for bad in [
            ".btrfs-lab-probe-0-abcdef.nocow",
            ".btrfs-lab-probe--abcdef.nocow",
            ".btrfs-lab-probe-12-abcde.nocow",
            ".btrfs-lab-probe-12-abcdeg.nocow",
            ".btrfs-lab-probe-12-abcdef.nocow2",
            ".btrfs-lab-probe-12-abcdef-r.test",
            ".btrfs-lab-probe-12-abcdef-r1.test.bak",
            ".btrfs-lab-probe-x1-abcdef.nocow",
            ".btrfs-lab-probe-99999999999-abcdef.nocow",
            "btrfs-lab-probe-12-abcdef.nocow",
            "data.bin",
        ] {
            assert_eq!(parse_name(bad), None, "{bad}");
        }
        assert!(is_control_file_name("r0.control"));
        assert!(!is_control_file_name("r.control"));
        assert!(!is_control_file_name("notes.txt"));
    }

    #[test]
    fn only_dead_probes_leftovers_of_ours_are_removed() {
        let t = tempfile::tempdir_in("/var/tmp").unwrap();
        let p = t.path();
        // A pid that is not running: above pid_max's default range.
        let dead = (4_194_304..4_194_404).find(|&pid| !pid_alive(pid)).unwrap();
        let me = std::process::id();
        let dead_dir = format!("{PREFIX}{dead}-abcdef.nocow");
        std::fs::create_dir(p.join(&dead_dir)).unwrap();
        std::fs::write(p.join(&dead_dir).join("r0.control"), "x").unwrap();
        let dead_file = format!("{PREFIX}{dead}-abcdef-r0.test");
        std::fs::write(p.join(&dead_file), "x").unwrap();
        // Kept: a live pid's, a directory with a foreign file, a link,
        // other names.
        let live = format!("{PREFIX}{me}-abcdef.nocow");
        std::fs::create_dir(p.join(&live)).unwrap();
        let foreign = format!("{PREFIX}{dead}-012345.nocow");
        std::fs::create_dir(p.join(&foreign)).unwrap();
        std::fs::write(p.join(&foreign).join("precious.db"), "x").unwrap();
        let link = format!("{PREFIX}{dead}-111111-r0.test");
        std::os::unix::fs::symlink("/etc/hostname", p.join(&link)).unwrap();
        std::fs::write(p.join("data.bin"), "x").unwrap();

        let dir = File::open(p).unwrap();
        assert_eq!(remove_stale(&dir), {
            let mut v = vec![dead_dir.clone(), dead_file.clone()];
            v.sort();
            v
        });
        assert!(!p.join(&dead_dir).exists());
        assert!(!p.join(&dead_file).exists());
        assert!(p.join(&live).is_dir());
        assert!(p.join(&foreign).join("precious.db").is_file());
        assert!(p.join(&link).symlink_metadata().is_ok());
        assert!(p.join("data.bin").is_file());
        assert!(std::path::Path::new("/etc/hostname").exists());
    }

    #[test]
    fn scratch_removes_leftovers_on_drop() {
        let t = tempfile::tempdir_in("/var/tmp").unwrap();
        {
            let mut s = Scratch::new(HeldDir::open(t.path()).unwrap()).unwrap();
            s.make_control_dir("c.nocow").unwrap();
            // O_DIRECT may be refused here (tmpfs): the entries are made
            // with plain files then.
            if s.create(true, "r0.control").is_err() || s.create(false, "t").is_err() {
                let p = t.path().join("c.nocow/r0.control");
                std::fs::write(&p, "x").unwrap();
                let id = FileIdentity::of(&File::open(&p).unwrap()).unwrap();
                s.files.push((true, "r0.control".to_owned(), id));
            }
            assert!(t.path().join("c.nocow/r0.control").exists());
        }
        assert_eq!(std::fs::read_dir(t.path()).unwrap().count(), 0);
    }
}
