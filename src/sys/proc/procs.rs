//! Which running processes hold a file open (a descriptor or a mapping),
//! found by walking `/proc/*/fd` and `/proc/*/maps` as `fuser` does.

use std::collections::{BTreeMap, HashMap};
use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::parse::proc_maps::parse_maps_line;
use crate::sys::block::loopdev::FileIdentity;
use crate::sys::fs::root::SysRoot;

/// A process that has a file open.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Opener {
    /// Process id.
    pub pid: u32,
    /// Its command line (shortened), or its `comm` when that is unreadable.
    pub command: String,
    /// `fd` (an open descriptor) or `mmap` (a mapping).
    pub how: String,
}

/// The result of one walk over the processes.
#[derive(Debug, Clone, Default)]
pub(crate) struct OpenFiles {
    /// Openers per file identity.
    pub(crate) by_file: HashMap<FileIdentity, Vec<Opener>>,
    /// Processes whose descriptors could not be read (not root).
    pub(crate) unreadable: usize,
}

impl OpenFiles {
    /// The processes that hold `id` open.
    pub(crate) fn openers(&self, id: FileIdentity) -> &[Opener] {
        self.by_file.get(&id).map_or(&[], Vec::as_slice)
    }
}

/// "pid 42 (qemu-system-x86_64 ...), pid 43 (...)" for messages.
pub fn describe(openers: &[Opener]) -> String {
    openers
        .iter()
        .map(|o| format!("pid {} ({})", o.pid, o.command))
        .collect::<Vec<_>>()
        .join(", ")
}

const COMMAND_MAX: usize = 80;

/// Largest command line read whole.
const CMDLINE_CAP: usize = 256 << 10;

/// The whole command line of `pid`, its words joined by spaces (invalid
/// UTF-8 replaced), for recognising a program by its flags; None when it
/// cannot be read (gone, a kernel thread's empty one is `Some("")`).
pub(crate) fn command_line(root: &SysRoot, pid: u32) -> Option<String> {
    let bytes = root
        .read_bytes(&root.proc(&format!("{pid}/cmdline")), CMDLINE_CAP)
        .ok()?;
    Some(
        bytes
            .split(|b| *b == 0)
            .filter(|w| !w.is_empty())
            .map(String::from_utf8_lossy)
            .collect::<Vec<_>>()
            .join(" "),
    )
}

/// The command line of `pid`, for messages.
pub(crate) fn command_of(root: &SysRoot, pid: u32) -> String {
    let cmdline = fs::read(root.proc(&format!("{pid}/cmdline"))).unwrap_or_default();
    let mut words: Vec<String> = cmdline
        .split(|b| *b == 0)
        .filter(|w| !w.is_empty())
        .map(|w| String::from_utf8_lossy(w).into_owned())
        .collect();
    if words.is_empty() {
        let comm = fs::read_to_string(root.proc(&format!("{pid}/comm"))).unwrap_or_default();
        words.push(format!("[{}]", comm.trim()));
    }
    let mut text = words.join(" ");
    if text.chars().count() > COMMAND_MAX {
        text = text.chars().take(COMMAND_MAX - 1).collect::<String>() + "…";
    }
    text
}

/// Finds the processes (other than this one) that have any of `targets` open,
/// always in the running system's `/proc`: never under a root prefix
/// (`BTRFS_LAB_SYSROOT`), which would let a fake tree hide a writer from a
/// command that replaces files. Descriptors are matched by device and inode (`stat` of `/proc/PID/fd/N`
/// follows to the file itself); mappings by inode and path, because
/// `/proc/PID/maps` shows the superblock's device, which on btrfs differs
/// from the subvolume's `st_dev`.
pub fn open_files(targets: &[(FileIdentity, PathBuf)]) -> OpenFiles {
    let root = &SysRoot::host();
    let mut result = OpenFiles::default();
    if targets.is_empty() {
        return result;
    }
    let ids: HashMap<FileIdentity, ()> = targets.iter().map(|(id, _)| (*id, ())).collect();
    let by_path: BTreeMap<(u64, &Path), FileIdentity> = targets
        .iter()
        .map(|(id, p)| ((id.ino, p.as_path()), *id))
        .collect();
    let me = std::process::id();
    let Ok(procs) = fs::read_dir(root.proc("")) else {
        return result;
    };
    for entry in procs.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<u32>().ok())
        else {
            continue;
        };
        if pid == me {
            continue;
        }
        let mut found: Vec<(FileIdentity, &'static str)> = Vec::new();
        match fs::read_dir(entry.path().join("fd")) {
            Ok(fds) => {
                for fd in fds.flatten() {
                    if let Ok(m) = fs::metadata(fd.path()) {
                        let id = FileIdentity {
                            dev: m.dev(),
                            ino: m.ino(),
                        };
                        if ids.contains_key(&id) {
                            found.push((id, "fd"));
                        }
                    }
                }
            }
            // The process exited meanwhile, or it is not ours to look at.
            Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => result.unreadable += 1,
            Err(_) => continue,
        }
        if let Ok(maps) = fs::read_to_string(entry.path().join("maps")) {
            for m in maps.lines().filter_map(parse_maps_line) {
                if let Some(id) = by_path.get(&(m.inode, Path::new(m.path))) {
                    found.push((*id, "mmap"));
                }
            }
        }
        found.sort_by_key(|(id, how)| (id.dev, id.ino, *how));
        found.dedup();
        if found.is_empty() {
            continue;
        }
        let command = command_of(root, pid);
        for (id, how) in found {
            result.by_file.entry(id).or_default().push(Opener {
                pid,
                command: command.clone(),
                how: how.to_owned(),
            });
        }
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::{Command, Stdio};

    #[test]
    fn finds_a_child_that_holds_a_file_as_stdin() {
        let t = tempfile::tempdir().unwrap();
        let f = t.path().join("held");
        fs::write(&f, "x").unwrap();
        let other = t.path().join("free");
        fs::write(&other, "y").unwrap();
        let mut child = Command::new("sleep")
            .arg("30")
            .stdin(fs::File::open(&f).unwrap())
            .stdout(Stdio::null())
            .spawn()
            .unwrap();
        // Until exec has run, the child's command line is not yet `sleep 30`.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while fs::read(format!("/proc/{}/cmdline", child.id()))
            .is_ok_and(|c| !c.starts_with(b"sleep"))
            && std::time::Instant::now() < deadline
        {
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        let id = |p: &Path| FileIdentity::of(&fs::File::open(p).unwrap()).unwrap();
        let found = open_files(&[(id(&f), f.clone()), (id(&other), other.clone())]);
        child.kill().unwrap();
        child.wait().unwrap();
        let openers = found.openers(id(&f));
        assert!(
            openers.iter().any(|o| o.pid == child.id() && o.how == "fd"),
            "{openers:?}"
        );
        assert!(openers[0].command.starts_with("sleep"), "{openers:?}");
        assert!(found.openers(id(&other)).is_empty());
    }
}
