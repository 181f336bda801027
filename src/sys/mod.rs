//! Kernel interfaces: ioctls, sysfs, procfs, mounts, loop devices, O_DIRECT
//! I/O and the external programs btrfs-lab drives. All `unsafe` of the crate
//! lives in [`ioctl`], [`nvme`], [`extents`], [`memio`] and [`lease`].

pub(crate) mod beneath;
pub(crate) mod blockdev;
pub mod btrfs;
pub mod cgroup;
pub mod counters;
pub(crate) mod direct_io;
pub(crate) mod diskstats;
pub(crate) mod extents;
pub(crate) mod fdinfo;
pub(crate) mod filecopy;
pub mod filesystem;
pub mod fio;
pub mod ioctl;
pub(crate) mod lease;
pub mod loopdev;
pub mod memio;
pub mod mounts;
pub mod nonce;
pub(crate) mod nvme;
pub mod outfile;
pub(crate) mod pagecache;
pub(crate) mod procs;
pub mod root;
pub mod signals;
pub mod target;
pub mod tools;
pub(crate) mod topology;
pub(crate) mod tracefs;
pub(crate) mod xattrs;

/// True when running as root (effective uid 0).
pub fn is_root() -> bool {
    nix::unistd::geteuid().is_root()
}

/// The running kernel's release (`6.18.44-...`).
pub fn kernel_release() -> String {
    nix::sys::utsname::uname()
        .map(|u| u.release().to_string_lossy().into_owned())
        .unwrap_or_else(|_| "unknown".to_owned())
}
