//! Per-file evidence of page-cache dirtying from the kernel tracepoint
//! `writeback:writeback_dirty_folio` (fields `name`, the backing device, and
//! `ino`), counted in a private trace instance.
//!
//! The instance (`instances/btrfs-lab-<pid>-<6 hex>`) is made for one run
//! and removed on drop, so on every exit path that runs destructors (errors,
//! SIGINT/SIGTERM handled as errors, panics). A SIGKILLed run leaves it: the
//! next run removes instances of ours whose pid is dead
//! ([`remove_stale`]). Only files inside the instance are written; the
//! global trace settings (tracing_on, the global event's enable and filter,
//! the global buffer) are never touched.
//!
//! The kernel filters the events (`name == "<bdi>" && (ino == A || ...)`),
//! so only the watched files' folios reach the ring buffer; the buffer is
//! drained (trace_pipe, non-blocking) as the caller goes, and overruns are
//! counted, so a large write cannot make the count silently short. Hist
//! triggers would aggregate in the kernel, but they need
//! CONFIG_HIST_TRIGGERS, which many kernels (this project's test machine
//! included) lack; the filter works everywhere the tracepoint exists.

use std::collections::HashMap;
use std::fs::{self, File, OpenOptions};
use std::io::{ErrorKind as IoKind, Read};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use rustix::mount::{MountFlags, mount};

use crate::error::{Error, ErrorKind, Result};
use crate::sys::fs::root::SysRoot;

/// Every instance we make is named `btrfs-lab-<pid>-<6 hex>`.
pub(crate) const INSTANCE_PREFIX: &str = "btrfs-lab-";
/// The event, relative to an instance's `events/`.
pub(crate) const EVENT: &str = "writeback/writeback_dirty_folio";
/// Per-CPU ring buffer of our instance, KiB (one event is ~60 bytes).
const BUFFER_KB: u32 = 4096;
/// Longest filter we write (the kernel accepts a page).
const FILTER_MAX: usize = 3500;

/// Where tracefs is mounted in this process's view, if anywhere.
pub(crate) fn find_tracefs(root: &SysRoot) -> Option<PathBuf> {
    crate::sys::proc::mountinfo::find_type(root, "tracefs")
}

/// Mounts tracefs at /sys/kernel/tracing in the private mount namespace of
/// this process (see [`crate::sys::proc::counters::enter_private_mount_namespace`]).
pub(crate) fn mount_private_tracefs() -> Result<PathBuf> {
    let target = PathBuf::from("/sys/kernel/tracing");
    crate::sys::proc::counters::enter_private_mount_namespace()?;
    mount("tracefs", &target, "tracefs", MountFlags::empty(), None)
        .map_err(|e| crate::sys::kernel::errno::to_error(e, "cannot mount tracefs at", &target))?;
    Ok(target)
}

/// A tracefs to use: the mounted one, else (root, host, allowed) a private
/// mount. `Err` says why there is none, in words for the report.
pub(crate) fn locate(
    root: &SysRoot,
    allow_private_mount: bool,
) -> std::result::Result<PathBuf, String> {
    if !rustix::process::geteuid().is_root() {
        return Err("the per-file tracepoint is in tracefs, which needs root".into());
    }
    let dir = match find_tracefs(root) {
        Some(p) => p,
        None if allow_private_mount && root.is_host() => {
            mount_private_tracefs().map_err(|e| e.message().to_owned())?
        }
        None => return Err("tracefs is not mounted".into()),
    };
    if !dir.join("events").join(EVENT).join("format").exists() {
        return Err(format!(
            "this kernel has no {EVENT} tracepoint (or its tracefs lacks instances)"
        ));
    }
    if !dir.join("instances").is_dir() {
        return Err("this kernel's tracefs has no instances directory".into());
    }
    Ok(dir)
}

/// The pid an instance name of ours carries; `None` for any other name.
pub(crate) fn instance_pid(name: &str) -> Option<u32> {
    let rest = name.strip_prefix(INSTANCE_PREFIX)?;
    let (pid, nonce) = rest.split_once('-')?;
    let ok_pid = !pid.is_empty() && pid.len() <= 10 && pid.bytes().all(|b| b.is_ascii_digit());
    let ok_nonce = nonce.len() == 6 && nonce.bytes().all(|b| b.is_ascii_hexdigit());
    if !(ok_pid && ok_nonce) {
        return None;
    }
    pid.parse().ok().filter(|&p| p > 0)
}

/// Removes the instances of ours whose pid is no longer running (a run
/// killed with SIGKILL); returns their names. Other instances, and ours of
/// live processes, are left alone.
pub(crate) fn remove_stale(tracefs: &Path, alive: impl Fn(u32) -> bool) -> Vec<String> {
    let Ok(entries) = fs::read_dir(tracefs.join("instances")) else {
        return Vec::new();
    };
    let mut removed = Vec::new();
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let stale = instance_pid(&name).is_some_and(|pid| !alive(pid));
        if stale && fs::remove_dir(e.path()).is_ok() {
            removed.push(name);
        }
    }
    removed.sort();
    removed
}

/// The kernel filter for folios of the watched inodes on their backing
/// devices: `(name == "btrfs-3" && (ino == 257 || ino == 300)) || ...`.
pub(crate) fn filter_for(watch: &[(String, Vec<u64>)]) -> Result<String> {
    let mut parts = Vec::new();
    for (bdi, inodes) in watch {
        if bdi.is_empty() || bdi.contains(['"', '\\', '\n']) || inodes.is_empty() {
            return Err(Error::new(
                ErrorKind::Usage,
                format!("cannot filter the tracepoint on {bdi:?}"),
            ));
        }
        let inos: Vec<String> = inodes.iter().map(|i| format!("ino == {i}")).collect();
        parts.push(format!("(name == \"{bdi}\" && ({}))", inos.join(" || ")));
    }
    if parts.is_empty() {
        return Err(Error::new(ErrorKind::Usage, "no file to watch"));
    }
    let f = parts.join(" || ");
    if f.len() > FILTER_MAX {
        return Err(Error::new(
            ErrorKind::Unsupported,
            format!(
                "too many files to watch at once ({}): the tracepoint filter would be too long",
                watch.iter().map(|(_, i)| i.len()).sum::<usize>()
            ),
        ));
    }
    Ok(f)
}

/// The backing device and inode of one trace_pipe line of the event
/// (`...: writeback_dirty_folio: bdi btrfs-3: ino=258 index=17`).
pub(crate) fn parse_line(line: &str) -> Option<(&str, u64)> {
    let rest = &line[line.find(" bdi ")? + 5..];
    let (bdi, rest) = rest.split_once(": ino=")?;
    let digits = rest.split(|c: char| !c.is_ascii_digit()).next()?;
    Some((bdi, digits.parse().ok()?))
}

/// Sum of `overrun` and `dropped events` over `per_cpu/cpu*/stats` text.
pub(crate) fn lost_in_stats(text: &str) -> u64 {
    text.lines()
        .filter_map(|l| {
            let (k, v) = l.split_once(':')?;
            matches!(k.trim(), "overrun" | "dropped events")
                .then(|| v.trim().parse::<u64>().ok())
                .flatten()
        })
        .sum()
}

/// A private trace instance counting dirtied folios per inode.
#[derive(Debug)]
pub(crate) struct FolioTrace {
    dir: PathBuf,
    name: String,
    pipe: Option<File>,
    pending: String,
    counts: HashMap<(String, u64), u64>,
}

impl FolioTrace {
    /// Makes the instance `btrfs-lab-<pid>-<nonce>` under `tracefs`, with
    /// the event off.
    pub fn create(tracefs: &Path, nonce: &str) -> Result<Self> {
        let name = format!("{INSTANCE_PREFIX}{}-{nonce}", std::process::id());
        let dir = tracefs.join("instances").join(&name);
        fs::create_dir(&dir)
            .map_err(|e| Error::from_io(&e, "cannot create the trace instance", &dir))?;
        let t = Self {
            dir,
            name,
            pipe: None,
            pending: String::new(),
            counts: HashMap::new(),
        };
        // A bigger buffer is a convenience; the default works too.
        let _ = fs::write(t.dir.join("buffer_size_kb"), BUFFER_KB.to_string());
        Ok(t)
    }

    /// The instance's name (under `instances/`).
    pub fn name(&self) -> &str {
        &self.name
    }

    fn control(&self, file: &str, value: &str) -> Result<()> {
        let path = self.dir.join("events").join(EVENT).join(file);
        fs::write(&path, value).map_err(|e| Error::from_io(&e, "cannot write", &path))
    }

    /// Counts from now on the folios of `inodes` on `bdi` (replacing what
    /// was watched before; counts so far are kept).
    pub fn watch(&mut self, watch: &[(String, Vec<u64>)]) -> Result<()> {
        self.drain()?;
        self.control("filter", &filter_for(watch)?)?;
        self.control("enable", "1")?;
        if self.pipe.is_none() {
            let path = self.dir.join("trace_pipe");
            let f = OpenOptions::new()
                .read(true)
                .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
                .open(&path)
                .map_err(|e| Error::from_io(&e, "cannot open", &path))?;
            self.pipe = Some(f);
        }
        Ok(())
    }

    /// Reads what the kernel has recorded so far into the counts.
    pub fn drain(&mut self) -> Result<()> {
        let Some(pipe) = self.pipe.as_mut() else {
            return Ok(());
        };
        let mut buf = vec![0u8; 64 << 10];
        loop {
            match pipe.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => {
                    self.pending.push_str(&String::from_utf8_lossy(&buf[..n]));
                    if let Some(end) = self.pending.rfind('\n') {
                        for line in self.pending[..end].lines() {
                            if let Some((bdi, ino)) = parse_line(line) {
                                *self.counts.entry((bdi.to_owned(), ino)).or_default() += 1;
                            }
                        }
                        self.pending.drain(..=end);
                    }
                }
                Err(e) if e.kind() == IoKind::WouldBlock => break,
                Err(e) if e.kind() == IoKind::Interrupted => continue,
                Err(e) => {
                    return Err(Error::from_io(
                        &e,
                        "cannot read",
                        &self.dir.join("trace_pipe"),
                    ));
                }
            }
        }
        Ok(())
    }

    /// Folios of `ino` on `bdi` dirtied so far (after a [`Self::drain`]).
    pub fn count(&self, bdi: &str, ino: u64) -> u64 {
        self.counts
            .get(&(bdi.to_owned(), ino))
            .copied()
            .unwrap_or(0)
    }

    /// Events the ring buffer lost (overwritten before they were read, or
    /// dropped): when not zero, counts are lower bounds.
    pub fn lost_events(&self) -> u64 {
        let Ok(cpus) = fs::read_dir(self.dir.join("per_cpu")) else {
            return 0;
        };
        cpus.flatten()
            .filter_map(|c| fs::read_to_string(c.path().join("stats")).ok())
            .map(|t| lost_in_stats(&t))
            .sum()
    }
}

impl Drop for FolioTrace {
    fn drop(&mut self) {
        let _ = self.control("enable", "0");
        self.pipe = None;
        // rmdir fails with EBUSY while a file of the instance is open; ours
        // is closed, so this succeeds unless someone else holds one.
        for _ in 0..50 {
            match fs::remove_dir(&self.dir) {
                Err(e) if e.raw_os_error() == Some(libc::EBUSY) => {
                    std::thread::sleep(std::time::Duration::from_millis(10));
                }
                _ => break,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn instance_names() {
        assert_eq!(instance_pid("btrfs-lab-123-abcdef"), Some(123));
        for bad in [
            "btrfs-lab-0-abcdef",
            "btrfs-lab-12-abcde",
            "btrfs-lab-x1-abcdef",
            "btrfs-lab-12-abcdefg",
            "other-12-abcdef",
            "btrfs-lab--abcdef",
        ] {
            assert_eq!(instance_pid(bad), None, "{bad}");
        }
    }

    #[test]
    fn stale_instances_of_dead_pids_only() {
        let t = tempfile::tempdir().unwrap();
        let inst = t.path().join("instances");
        for n in ["btrfs-lab-7-aaaaaa", "btrfs-lab-8-bbbbbb", "user-trace"] {
            fs::create_dir_all(inst.join(n)).unwrap();
        }
        let removed = remove_stale(t.path(), |pid| pid == 8);
        assert_eq!(removed, vec!["btrfs-lab-7-aaaaaa"]);
        let mut left: Vec<String> = fs::read_dir(&inst)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        assert_eq!(left, vec!["btrfs-lab-8-bbbbbb", "user-trace"]);
    }

    #[test]
    fn filters_and_lines() {
        let w = |b: &str, i: &[u64]| vec![(b.to_owned(), i.to_vec())];
        assert_eq!(
            filter_for(&w("btrfs-3", &[257, 300])).unwrap(),
            "(name == \"btrfs-3\" && (ino == 257 || ino == 300))"
        );
        let two = [w("btrfs-3", &[257]), w("7:0", &[12])].concat();
        assert_eq!(
            filter_for(&two).unwrap(),
            "(name == \"btrfs-3\" && (ino == 257)) || (name == \"7:0\" && (ino == 12))"
        );
        assert!(filter_for(&w("bad\"name", &[1])).is_err());
        assert!(filter_for(&w("btrfs-3", &[])).is_err());
        assert!(filter_for(&[]).is_err());
        assert!(filter_for(&w("btrfs-3", &(1..1000).collect::<Vec<_>>())).is_err());
        let line = "   dd-4242    [001] ..... 1781.24: writeback_dirty_folio: bdi btrfs-1131: ino=258 index=17";
        assert_eq!(parse_line(line), Some(("btrfs-1131", 258)));
        assert_eq!(parse_line("# tracer: nop"), None);
        let stats = "entries: 1280\noverrun: 3\ncommit overrun: 0\nbytes: 76800\ndropped events: 2\nread events: 0\n";
        assert_eq!(lost_in_stats(stats), 5);
    }
}
