//! A root prefix for every sysfs and procfs read, so tests (and users
//! looking at a captured tree) can point the readers at a fixture.

use std::path::{Path, PathBuf};

/// Environment variable that sets the default root prefix.
pub const SYSROOT_ENV: &str = "BTRFS_LAB_SYSROOT";

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

    /// `--sysroot` if given, else `$BTRFS_LAB_SYSROOT`, else `/`.
    pub fn from_option(opt: Option<&Path>) -> Self {
        match opt {
            Some(p) => Self::new(p),
            None => match std::env::var_os(SYSROOT_ENV) {
                Some(p) if !p.is_empty() => Self::new(PathBuf::from(p)),
                _ => Self::host(),
            },
        }
    }

    /// True when reading the running system.
    pub fn is_host(&self) -> bool {
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
}

#[cfg(test)]
mod tests {
    use super::*;

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
