//! Work directories of `bench` runs that died (`.btrfs-lab-bench-PID-...`,
//! [`crate::bench::WORK_DIR_PREFIX`]): a SIGKILLed or crashed run leaves its
//! test files, which hold space until someone removes them. Doctor looks at
//! the top level of each mount and at the directories it examines, names
//! each one with its size and the command that removes them. The walk is by
//! held descriptor and never follows a link; [`findings`] is pure.

use std::ffi::OsStr;
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use crate::bench::WORK_DIR_PREFIX;
use crate::model::finding::{Code, Finding, rules};
use crate::report::units::{UnitMode, pretty_size};
use crate::sys::fs::beneath::{HeldDir, open_dir_beneath};
use crate::sys::fs::scratch::{self, EntryKind};
use crate::sys::tools::display_argv;

/// Most entries counted in one leftover (a huge tree is still named, its
/// size then a lower bound).
const MAX_ENTRIES: usize = 1_000_000;

/// A bench work directory whose process is gone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BenchLeftover {
    /// Where it is.
    pub path: PathBuf,
    /// The pid in its name.
    pub pid: u32,
    /// Bytes allocated to what it holds (a lower bound when `partial`).
    pub bytes: u64,
    /// The walk stopped early (too many entries, or unreadable parts).
    pub partial: bool,
}

/// The pid in a bench work directory's name: `PREFIX PID-XXXXXXXX` (the
/// run's directory) or `PREFIX meta-PID-N` (`--small-files`).
pub(crate) fn pid_of(name: &OsStr) -> Option<u32> {
    let rest = name.as_bytes().strip_prefix(WORK_DIR_PREFIX.as_bytes())?;
    let rest = std::str::from_utf8(rest).ok()?;
    let rest = rest.strip_prefix("meta-").unwrap_or(rest);
    let (pid, tail) = rest.split_once('-')?;
    if pid.is_empty()
        || !pid.bytes().all(|b| b.is_ascii_digit())
        || tail.is_empty()
        || !tail.bytes().all(|b| b.is_ascii_hexdigit())
    {
        return None;
    }
    pid.parse().ok().filter(|p| *p > 0)
}

/// True when the pid is not a running btrfs-lab (gone, or reused by
/// another program).
fn is_stale(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/comm")) {
        Ok(comm) => comm.trim_end() != "btrfs-lab",
        Err(e) => e.kind() == std::io::ErrorKind::NotFound,
    }
}

/// Bytes allocated below the directory `dir` (by descriptor, links not
/// followed, other filesystems not entered); `false` when incomplete.
fn size_of_tree(dir: BorrowedFd<'_>, entries: &mut usize, depth: u32) -> (u64, bool) {
    let Ok(fd) = scratch::reopen_dir(dir) else {
        return (0, false);
    };
    let Ok(dev) = scratch::stat_fd(&fd).map(|s| s.st_dev) else {
        return (0, false);
    };
    let Ok(names) = scratch::entry_names(&fd) else {
        return (0, false);
    };
    let mut bytes = 0u64;
    let mut complete = true;
    for name in names {
        let Ok(name) = name else {
            return (bytes, false);
        };
        *entries += 1;
        if *entries > MAX_ENTRIES {
            return (bytes, false);
        }
        let Ok(st) = scratch::stat_at(&fd, &name) else {
            complete = false;
            continue;
        };
        bytes = bytes.saturating_add(scratch::allocated_bytes(&st));
        if scratch::kind_of(&st) == EntryKind::Dir {
            if st.st_dev != dev || depth >= 64 {
                complete = false;
                continue;
            }
            match open_dir_beneath(fd.as_fd(), Path::new(&name)) {
                Ok(sub) => {
                    let (b, c) = size_of_tree(sub.as_fd(), entries, depth + 1);
                    bytes = bytes.saturating_add(b);
                    complete &= c;
                }
                Err(_) => complete = false,
            }
        }
    }
    (bytes, complete)
}

/// The stale bench work directories directly inside each of `dirs`
/// (unreadable directories are skipped: doctor still reports the rest).
pub fn scan(dirs: &[PathBuf]) -> Vec<BenchLeftover> {
    let mut out: Vec<BenchLeftover> = Vec::new();
    for dir in dirs {
        let Ok(held) = HeldDir::open(dir) else {
            continue;
        };
        let Ok(names) = held.names() else {
            continue;
        };
        for name in names {
            let Some(pid) = pid_of(&name) else {
                continue;
            };
            let Ok(Some(st)) = held.stat(&name) else {
                continue;
            };
            if scratch::kind_of(&st) != EntryKind::Dir || !is_stale(pid) {
                continue;
            }
            let path = held.join(&name);
            if out.iter().any(|l| l.path == path) {
                continue;
            }
            let (bytes, complete) = match open_dir_beneath(held.fd(), Path::new(&name)) {
                Ok(fd) => {
                    let mut entries = 0;
                    size_of_tree(fd.as_fd(), &mut entries, 0)
                }
                Err(_) => (0, false),
            };
            out.push(BenchLeftover {
                path,
                pid,
                bytes: bytes.saturating_add(scratch::allocated_bytes(&st)),
                partial: !complete,
            });
        }
    }
    out
}

/// The finding for the leftovers of one filesystem (none: no finding).
pub fn findings(leftovers: &[BenchLeftover]) -> Vec<Finding> {
    if leftovers.is_empty() {
        return Vec::new();
    }
    let total: u64 = leftovers.iter().map(|l| l.bytes).sum();
    let partial = leftovers.iter().any(|l| l.partial);
    let size = |b: u64, partial: bool| {
        format!(
            "{}{}",
            if partial { "at least " } else { "" },
            pretty_size(b, UnitMode::default())
        )
    };
    let mut fi = Finding::new(
        Code::BenchLeftovers,
        format!(
            "{} work director{} of bench runs that died hold {}",
            leftovers.len(),
            if leftovers.len() == 1 { "y" } else { "ies" },
            size(total, partial)
        ),
        "a bench run that was killed (SIGKILL, a crash, a power cut) leaves its test files behind; they hold space until removed (a later bench run in the same directory removes them too)",
    );
    fi = fi.with_severity(rules::bench_leftovers(total));
    for l in leftovers {
        fi = fi.with_evidence(
            "directory",
            format!(
                "{} ({}, pid {} gone)",
                l.path.display(),
                size(l.bytes, l.partial),
                l.pid
            ),
        );
    }
    let paths: Vec<String> = leftovers
        .iter()
        .map(|l| l.path.display().to_string())
        .collect();
    let mut argv = vec!["rm", "-rf", "--"];
    argv.extend(paths.iter().map(String::as_str));
    vec![fi.with_command(display_argv(&argv))]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::finding::Severity;

    #[test]
    fn names_of_bench_work_dirs() {
        let p = |s: &str| pid_of(OsStr::new(s));
        assert_eq!(p(&format!("{WORK_DIR_PREFIX}1234-00ab12cd")), Some(1234));
        assert_eq!(p(&format!("{WORK_DIR_PREFIX}meta-77-3")), Some(77));
        for other in [
            "btrfs-lab-bench-1-2".to_owned(),
            format!("{WORK_DIR_PREFIX}x-00ab12cd"),
            format!("{WORK_DIR_PREFIX}12"),
            format!("{WORK_DIR_PREFIX}12-"),
            format!("{WORK_DIR_PREFIX}12-zz"),
            format!("{WORK_DIR_PREFIX}0-1"),
        ] {
            assert_eq!(p(&other), None, "{other}");
        }
    }

    #[test]
    fn one_finding_with_every_path_size_and_the_command() {
        assert!(findings(&[]).is_empty());
        let small = BenchLeftover {
            path: PathBuf::from("/mnt/a/.btrfs-lab-bench-12-00000001"),
            pid: 12,
            bytes: 64 << 20,
            partial: false,
        };
        let f = findings(std::slice::from_ref(&small));
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].code, "bench-leftovers");
        assert_eq!(f[0].severity, Severity::Info);
        assert!(f[0].title.contains("64.00MiB"), "{}", f[0].title);
        assert!(
            f[0].evidence[0]
                .value
                .starts_with("/mnt/a/.btrfs-lab-bench-12-00000001 (64.00MiB, pid 12 gone)"),
            "{:?}",
            f[0].evidence
        );
        assert_eq!(
            f[0].command.as_deref(),
            Some("rm -rf -- /mnt/a/.btrfs-lab-bench-12-00000001")
        );
        let big = BenchLeftover {
            path: PathBuf::from("/mnt/b c/.btrfs-lab-bench-13-00000002"),
            pid: 13,
            bytes: 2 << 30,
            partial: true,
        };
        let f = findings(&[small, big]);
        assert_eq!(f[0].severity, Severity::Warning);
        assert!(
            f[0].title.starts_with("2 work directories"),
            "{}",
            f[0].title
        );
        assert!(f[0].title.contains("at least"), "{}", f[0].title);
        assert_eq!(f[0].evidence.len(), 2);
        assert!(
            f[0].command.as_deref().unwrap().contains("'/mnt/b c/"),
            "{:?}",
            f[0].command
        );
    }
}
