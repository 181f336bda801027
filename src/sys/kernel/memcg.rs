//! A memory cgroup of the process's own, for a while (`bench --small-files`'
//! cold stat). What the process allocates while it is in the cgroup is
//! charged to it, the dentries and inodes of the files it creates
//! included (both slab caches are accounted to the allocating task's
//! memory cgroup); reclaiming the cgroup afterwards (cgroup v1
//! `memory.force_empty`, v2 `memory.reclaim`) evicts those and nothing
//! charged elsewhere: the rest of the machine's caches stay.
//!
//! What it does not evict: btrfs charges its metadata blocks (the btree
//! inode's folios) to the root memory cgroup, so they stay in memory and a
//! later stat reads the inode items from memory, not from the devices.
//!
//! The cgroup is a child of the process's own memory cgroup (v1), or a
//! sibling of it (v2: a cgroup with processes cannot have children with
//! controllers), named `btrfs-lab-cold-PID-NONCE`; the process goes back
//! and the cgroup is removed when the guard is dropped (those of killed
//! runs by the next one). On v2 the sibling is out of the process's own
//! cgroup's limits for that while (its parent's still apply).

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

/// The memory cgroup the process is in for a while.
#[derive(Debug)]
pub struct ScratchCgroup {
    dir: PathBuf,
    /// The `cgroup.procs` the process came from.
    home: PathBuf,
    v2: bool,
    inside: bool,
}

/// Undoes `\040`-style escapes of /proc/self/mountinfo.
fn unescape(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\'
            && i + 3 < b.len()
            && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c))
        {
            out.push((b[i + 1] - b'0') * 64 + (b[i + 2] - b'0') * 8 + (b[i + 3] - b'0'));
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Where the process's memory cgroup is: (directory, cgroup v2), from
/// /proc/self/mountinfo and /proc/self/cgroup. v1 first: a memory
/// controller bound to a v1 hierarchy is absent from v2.
pub(crate) fn locate(mountinfo: &str, cgroup: &str) -> Option<(PathBuf, bool)> {
    let mounts: Vec<(String, String, String, String)> = mountinfo
        .lines()
        .filter_map(|l| {
            let (pre, post) = l.split_once(" - ")?;
            let pre: Vec<&str> = pre.split(' ').collect();
            let post: Vec<&str> = post.split(' ').collect();
            Some((
                unescape(pre.get(3)?),
                unescape(pre.get(4)?),
                (*post.first()?).to_owned(),
                (*post.get(2).unwrap_or(&"")).to_owned(),
            ))
        })
        .collect();
    let join = |root: &str, mnt: &str, path: &str| -> Option<PathBuf> {
        let rel = path.strip_prefix(root.trim_end_matches('/'))?;
        let rel = rel.trim_start_matches('/');
        Some(if rel.is_empty() {
            PathBuf::from(mnt)
        } else {
            Path::new(mnt).join(rel)
        })
    };
    for line in cgroup.lines() {
        let mut f = line.splitn(3, ':');
        let (_, ctl, path) = (f.next()?, f.next()?, f.next()?);
        if ctl.split(',').any(|c| c == "memory") {
            let (root, mnt, _, _) = mounts
                .iter()
                .find(|(_, _, t, o)| t == "cgroup" && o.split(',').any(|x| x == "memory"))?;
            return Some((join(root, mnt, path)?, false));
        }
    }
    for line in cgroup.lines() {
        if let Some(path) = line.strip_prefix("0::") {
            let (root, mnt, _, _) = mounts.iter().find(|(_, _, t, _)| t == "cgroup2")?;
            return Some((join(root, mnt, path)?, true));
        }
    }
    None
}

/// The name of every scratch cgroup starts so, then the PID.
const PREFIX: &str = "btrfs-lab-cold-";

/// The PID in a scratch cgroup's name.
fn pid_of(name: &str) -> Option<u32> {
    name.strip_prefix(PREFIX)?.split('-').next()?.parse().ok()
}

/// Removes the scratch cgroups of processes that are gone (a SIGKILL left
/// them; empty, as their process is gone). Best effort.
fn sweep_stale(parent: &Path) {
    let Ok(entries) = fs::read_dir(parent) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name();
        let Some(pid) = name.to_str().and_then(pid_of) else {
            continue;
        };
        if pid != std::process::id() && !Path::new(&format!("/proc/{pid}")).exists() {
            let _ = fs::remove_dir(e.path());
        }
    }
}

fn write(path: &Path, what: &str) -> io::Result<()> {
    fs::write(path, what)
}

impl ScratchCgroup {
    /// Makes the cgroup (root). `Err` says in a few words why it cannot
    /// be had (no memory controller, not root, v2 without memory in the
    /// parent's subtree_control).
    pub fn create() -> std::result::Result<Self, String> {
        let mountinfo = fs::read_to_string("/proc/self/mountinfo")
            .map_err(|e| format!("cannot read /proc/self/mountinfo: {e}"))?;
        let cgroup = fs::read_to_string("/proc/self/cgroup")
            .map_err(|e| format!("cannot read /proc/self/cgroup: {e}"))?;
        let (own, v2) =
            locate(&mountinfo, &cgroup).ok_or("no memory cgroup controller is mounted")?;
        let parent = if v2 {
            // The parent, unless the process is in the hierarchy's root.
            let p = own
                .parent()
                .filter(|p| p.join("cgroup.subtree_control").exists())
                .map_or(own.clone(), Path::to_path_buf);
            let sub = fs::read_to_string(p.join("cgroup.subtree_control")).unwrap_or_default();
            if !sub.split_whitespace().any(|c| c == "memory") {
                return Err(format!(
                    "the memory controller is not enabled in {}",
                    p.join("cgroup.subtree_control").display()
                ));
            }
            p
        } else {
            own.clone()
        };
        sweep_stale(&parent);
        let name = format!(
            "{PREFIX}{}-{}",
            std::process::id(),
            crate::sys::fs::nonce::nonce()
        );
        let dir = parent.join(name);
        fs::create_dir(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        Ok(Self {
            dir,
            home: own.join("cgroup.procs"),
            v2,
            inside: false,
        })
    }

    /// The cgroup's directory.
    pub fn path(&self) -> &Path {
        &self.dir
    }

    /// Moves the whole process (every thread) into the cgroup.
    pub fn enter(&mut self) -> io::Result<()> {
        write(
            &self.dir.join("cgroup.procs"),
            &std::process::id().to_string(),
        )?;
        self.inside = true;
        Ok(())
    }

    /// Moves the process back where it was. Its charges stay with the
    /// cgroup.
    pub fn leave(&mut self) -> io::Result<()> {
        if self.inside {
            write(&self.home, &std::process::id().to_string())?;
            self.inside = false;
        }
        Ok(())
    }

    /// Bytes charged to the cgroup.
    pub fn charged(&self) -> Option<u64> {
        let f = if self.v2 {
            "memory.current"
        } else {
            "memory.usage_in_bytes"
        };
        fs::read_to_string(self.dir.join(f))
            .ok()?
            .trim()
            .parse()
            .ok()
    }

    /// Bytes of kernel memory charged to the cgroup, the dentries and
    /// inodes among them: v1 `memory.kmem.usage_in_bytes`, v2 the `slab`
    /// line of `memory.stat`. (Its anonymous memory, the threads' stacks,
    /// cannot be reclaimed without swap, so [`Self::charged`] says little
    /// of what a reclaim evicted.)
    pub fn kernel_charged(&self) -> Option<u64> {
        if self.v2 {
            let stat = fs::read_to_string(self.dir.join("memory.stat")).ok()?;
            stat.lines()
                .find_map(|l| l.strip_prefix("slab "))
                .and_then(|v| v.trim().parse().ok())
        } else {
            fs::read_to_string(self.dir.join("memory.kmem.usage_in_bytes"))
                .ok()?
                .trim()
                .parse()
                .ok()
        }
    }

    /// Reclaims what is charged to the cgroup: its clean page cache, and
    /// the dentries and inodes nobody holds. Rounds until one frees no
    /// kernel memory (at most ten), as the kernel's slab shrinkers work in
    /// batches. Measured on Linux 6.18 (cgroup v1): a storm of 50,000
    /// files has about 80% of its kernel memory freed, one of 5,000 none
    /// (the shrinkers defer batches this small): the caller checks what
    /// was freed.
    pub fn reclaim(&self) -> io::Result<()> {
        let mut last = self.kernel_charged();
        for _ in 0..10 {
            if self.v2 {
                let n = self.charged().unwrap_or(0).max(1 << 20);
                match write(&self.dir.join("memory.reclaim"), &n.to_string()) {
                    // EAGAIN: less than asked could be reclaimed.
                    Err(e) if e.raw_os_error() == Some(libc::EAGAIN) => {}
                    r => r?,
                }
            } else {
                write(&self.dir.join("memory.force_empty"), "0")?;
            }
            let now = self.kernel_charged();
            if now.is_none() || now >= last {
                break;
            }
            last = now;
        }
        Ok(())
    }
}

impl Drop for ScratchCgroup {
    fn drop(&mut self) {
        let _ = self.leave();
        // Charges left are moved to the parent when it goes. Just after
        // the process left, the kernel may still count it (EBUSY): a few
        // tries.
        for _ in 0..20 {
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

    const MI: &str = "\
25 30 0:22 / /sys/fs/cgroup rw - tmpfs tmpfs rw,mode=755
29 25 0:26 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
33 25 0:30 / /sys/fs/cgroup/unified rw,relatime - cgroup cgroup2 rw
";

    #[test]
    fn v1_memory_is_found_before_v2() {
        let cg = "4:memory:/a/b\n0::/\n";
        assert_eq!(
            locate(MI, cg),
            Some((PathBuf::from("/sys/fs/cgroup/memory/a/b"), false))
        );
        let cg = "4:memory:/\n";
        assert_eq!(
            locate(MI, cg),
            Some((PathBuf::from("/sys/fs/cgroup/memory"), false))
        );
    }

    #[test]
    fn v2_alone() {
        let mi = "35 24 0:30 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n";
        let cg = "0::/user.slice/user-0.slice/session-1.scope\n";
        assert_eq!(
            locate(mi, cg),
            Some((
                PathBuf::from("/sys/fs/cgroup/user.slice/user-0.slice/session-1.scope"),
                true
            ))
        );
        // A mount of a part of the hierarchy (a container's).
        let mi = "35 24 0:30 /lxc/c1 /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n";
        assert_eq!(
            locate(mi, "0::/lxc/c1/init.scope\n"),
            Some((PathBuf::from("/sys/fs/cgroup/init.scope"), true))
        );
        assert_eq!(locate("", "0::/\n"), None);
        assert_eq!(unescape("/a\\040b"), "/a b");
        assert_eq!(pid_of("btrfs-lab-cold-123-abcdef"), Some(123));
        assert_eq!(pid_of("btrfs-lab-cold-x"), None);
        assert_eq!(pid_of("other"), None);
    }
}
