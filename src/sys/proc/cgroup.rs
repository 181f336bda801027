//! cgroup v1 blkio throttling, for the sustained-write test: a fresh
//! cgroup under the blkio hierarchy, a write bandwidth limit per device
//! (`blkio.throttle.write_bps_device`), and moving a process into it.
//! Only cgroups created here are written to, and they are removed when
//! dropped.

use std::fs;
use std::path::{Path, PathBuf};

use crate::error::{Error, ErrorKind, Result};

/// Where the v1 blkio hierarchy is mounted on this kind of machine.
pub(crate) const BLKIO_ROOT: &str = "/sys/fs/cgroup/blkio";

/// Is a cgroup v1 blkio hierarchy with throttling there?
pub fn blkio_available() -> bool {
    Path::new(BLKIO_ROOT)
        .join("blkio.throttle.write_bps_device")
        .exists()
}

/// A blkio cgroup this process made; removed on drop (once empty).
#[derive(Debug)]
pub struct BlkioCgroup {
    path: PathBuf,
}

impl BlkioCgroup {
    /// Makes `BLKIO_ROOT/name`; fails if it exists.
    pub fn create(name: &str) -> Result<Self> {
        if name.is_empty() || name.contains('/') || name.starts_with('.') {
            return Err(Error::usage(format!("bad cgroup name {name:?}")));
        }
        if !blkio_available() {
            return Err(Error::new(
                ErrorKind::Unsupported,
                "no cgroup v1 blkio hierarchy with throttling at /sys/fs/cgroup/blkio",
            ));
        }
        let path = Path::new(BLKIO_ROOT).join(name);
        fs::create_dir(&path).map_err(|e| Error::from_io(&e, "cannot create", &path))?;
        Ok(Self { path })
    }

    /// Its directory.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Limits writes by its processes to device `major:minor` to `bps`
    /// bytes per second (0 removes the limit).
    pub fn set_write_bps(&self, major: u32, minor: u32, bps: u64) -> Result<()> {
        let f = self.path.join("blkio.throttle.write_bps_device");
        fs::write(&f, format!("{major}:{minor} {bps}\n"))
            .map_err(|e| Error::from_io(&e, "cannot write", &f))
    }

    /// Removes it now (it must have no processes left).
    pub fn remove(mut self) -> Result<()> {
        let p = std::mem::take(&mut self.path);
        fs::remove_dir(&p).map_err(|e| Error::from_io(&e, "cannot remove", &p))
    }
}

impl Drop for BlkioCgroup {
    fn drop(&mut self) {
        if !self.path.as_os_str().is_empty() {
            let _ = fs::remove_dir(&self.path);
        }
    }
}

/// Moves this whole process (every thread, and the children it starts
/// from now on) into the cgroup directory `dir`.
pub fn join(dir: &Path) -> Result<()> {
    let f = dir.join("cgroup.procs");
    fs::write(&f, format!("{}\n", std::process::id()))
        .map_err(|e| Error::from_io(&e, "cannot write", &f))
}
