//! Huge pages for I/O buffers: how many the kernel has free
//! (`/proc/meminfo`), and a reservation of more for one run
//! (`/proc/sys/vm/nr_hugepages`, root, asked for first), given back when
//! the guard drops: on success, error, panic and SIGINT/SIGTERM/SIGHUP
//! (the jobs stop and return). The change is recorded in the settings
//! ledger ([`crate::sys::kernel::settings`]) before it is made: after a
//! SIGKILL the next btrfs-lab command run as root puts it back.

use std::os::unix::fs::OpenOptionsExt;
use std::path::PathBuf;

use crate::error::{Error, ErrorKind, Result};
use crate::sys::fs::root::SysRoot;

/// What `/proc/meminfo` says of huge pages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HugePages {
    /// Bytes of one (`Hugepagesize`).
    pub page_bytes: u64,
    /// Reserved in all (`HugePages_Total`).
    pub total: u64,
    /// Free (`HugePages_Free`), of which `reserved_for_others` are promised.
    pub free: u64,
    /// Promised to mappings not yet faulted (`HugePages_Rsvd`).
    pub reserved_for_others: u64,
}

impl HugePages {
    /// Free pages nobody has been promised.
    pub fn available(&self) -> u64 {
        self.free.saturating_sub(self.reserved_for_others)
    }
}

/// Parses `/proc/meminfo`; None when it has no huge pages (a kernel
/// without hugetlbfs).
pub fn parse_meminfo(text: &str) -> Option<HugePages> {
    let field = |name: &str| {
        text.lines().find_map(|l| {
            let rest = l.strip_prefix(name)?.strip_prefix(':')?;
            rest.split_whitespace().next()?.parse::<u64>().ok()
        })
    };
    Some(HugePages {
        page_bytes: field("Hugepagesize")?.checked_mul(1024)?,
        total: field("HugePages_Total")?,
        free: field("HugePages_Free")?,
        reserved_for_others: field("HugePages_Rsvd").unwrap_or(0),
    })
}

/// The huge pages of this machine (or of `root`'s fixture).
pub fn read(root: &SysRoot) -> Option<HugePages> {
    let bytes = root.read_bytes(&root.proc("meminfo"), 64 << 10).ok()?;
    parse_meminfo(&String::from_utf8_lossy(&bytes))
}

/// Held (flock, exclusive) by the run that reserved huge pages: the pages
/// free while it runs are its own, not for another bench to take.
const LOCK: &str = "/run/btrfs-lab-hugepages.lock";

/// Another btrfs-lab run holds reserved huge pages now (its free pages are
/// not for this one).
pub fn reserved_by_another_run() -> bool {
    let Ok(f) = std::fs::File::open(LOCK) else {
        return false;
    };
    matches!(
        rustix::fs::flock(&f, rustix::fs::FlockOperation::NonBlockingLockShared),
        Err(rustix::io::Errno::WOULDBLOCK)
    )
}

/// Huge pages reserved for one run; the setting is put back on drop.
#[derive(Debug)]
pub struct Reservation {
    path: PathBuf,
    // The ledger's record of the change (on the host; a test's sysroot
    // keeps none): put back and deleted when dropped.
    change: Option<crate::sys::kernel::settings::Change>,
    // Held while reserved: see [`reserved_by_another_run`].
    _lock: std::fs::File,
    /// `vm.nr_hugepages` before.
    pub before: u64,
    /// What it was set to.
    pub during: u64,
}

/// Raises `vm.nr_hugepages` by `pages` (root). The kernel may find fewer
/// free pages (memory fragmented): then the setting is put back and the
/// error says how many it could reserve.
pub fn reserve(
    root: &SysRoot,
    ledger: &crate::sys::kernel::settings::Ledger,
    pages: u64,
) -> Result<Reservation> {
    let path = root.proc("sys/vm/nr_hugepages");
    let before: u64 = std::fs::read_to_string(&path)
        .map_err(|e| Error::from_io(&e, "cannot read", &path))?
        .trim()
        .parse()
        .map_err(|_| {
            Error::new(
                ErrorKind::Parse,
                format!("{} is not a number", path.display()),
            )
        })?;
    let lock = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .mode(0o644)
        .open(LOCK)
        .map_err(|e| {
            Error::from_io(
                &e,
                "cannot reserve huge pages: cannot open",
                std::path::Path::new(LOCK),
            )
            .with_hint("--hugepages needs root; leave it out to use ordinary buffers")
        })?;
    if rustix::fs::flock(&lock, rustix::fs::FlockOperation::NonBlockingLockExclusive).is_err() {
        return Err(Error::new(
            ErrorKind::Busy,
            "another btrfs-lab bench holds reserved huge pages right now",
        )
        .with_hint("wait for it to end, or leave out --hugepages"));
    }
    let free_before = read(root).map_or(0, |h| h.available());
    let during = before + pages;
    let write = || {
        std::fs::write(&path, during.to_string()).map_err(|e| {
            Error::from_io(&e, "cannot reserve huge pages: cannot write", &path)
                .with_hint("--hugepages needs root; leave it out to use ordinary buffers")
        })
    };
    let (change, before) = if root.prefix() == std::path::Path::new("/") {
        let c = crate::sys::kernel::settings::Change::apply(
            ledger,
            crate::sys::kernel::settings::Setting::NrHugepages,
            during,
            "bench",
        )
        .map_err(|e| {
            if e.kind() == ErrorKind::Permission {
                e.with_hint("--hugepages needs root; leave it out to use ordinary buffers")
            } else {
                e
            }
        })?;
        let b = c.before();
        (Some(c), b)
    } else {
        write()?;
        (None, before)
    };
    let r = Reservation {
        path: path.clone(),
        change,
        _lock: lock,
        before,
        during,
    };
    // The kernel allocates what it can at once; a few more tries find pages
    // that reclaim and compaction freed meanwhile.
    let mut got = read(root).map_or(0, |h| h.available());
    for _ in 0..4 {
        if got >= free_before + pages {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
        match &r.change {
            Some(c) => c.rewrite()?,
            None => write()?,
        }
        got = read(root).map_or(0, |h| h.available());
    }
    if got < free_before + pages {
        let n = got.saturating_sub(free_before);
        drop(r);
        return Err(Error::new(
            ErrorKind::NoSpace,
            format!(
                "the kernel could reserve only {n} of the {pages} huge pages asked for (memory is too fragmented or too full); the setting was put back"
            ),
        )
        .with_hint("leave out --hugepages (the report then says what ordinary buffers may cost), or reserve them at boot (hugepages=N)"));
    }
    Ok(r)
}

impl Drop for Reservation {
    fn drop(&mut self) {
        // The ledger's change puts it back itself (and keeps its record
        // when it cannot, for the next run).
        if self.change.is_none() {
            // Best effort: a failure here leaves the pages reserved, and
            // the plan named the value to restore.
            let _ = std::fs::write(&self.path, self.before.to_string());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn meminfo_of_a_machine_with_and_without_huge_pages() {
        // The layout of Linux 6.18's /proc/meminfo (x86_64), with huge-page
        // counts set for the test (generated, not read off a machine).
        let text = "MemTotal:       24598172 kB\nAnonHugePages:         0 kB\nShmemHugePages:        0 kB\nFileHugePages:   1370112 kB\nHugePages_Total:       8\nHugePages_Free:        6\nHugePages_Rsvd:        1\nHugePages_Surp:        0\nHugepagesize:       2048 kB\nHugetlb:           16384 kB\n";
        let h = parse_meminfo(text).unwrap();
        assert_eq!(
            h,
            HugePages {
                page_bytes: 2 << 20,
                total: 8,
                free: 6,
                reserved_for_others: 1
            }
        );
        assert_eq!(h.available(), 5);
        assert_eq!(parse_meminfo("MemTotal:       24598172 kB\n"), None);
    }
}
