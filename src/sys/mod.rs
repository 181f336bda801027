//! Kernel interfaces: ioctls, sysfs, procfs, mounts, loop devices, O_DIRECT
//! I/O and the external programs btrfs-lab drives, in rooms: [`kernel`]
//! (ioctls and syscalls), [`proc`] (procfs, sysfs, tracefs), [`fs`] (held
//! directories, output files, mounts), [`block`] (loop devices, topology) and
//! [`tools`] (btrfs-progs, fio).

// `unsafe` lives in `kernel/` only (each block with a SAFETY comment); the
// other rooms cannot opt back in (`forbid`, unlike the crate's `deny`, cannot
// be overridden by an inner `allow`).
#[forbid(unsafe_code)]
pub mod block;
#[forbid(unsafe_code)]
pub mod fs;
pub mod kernel;
#[forbid(unsafe_code)]
pub mod proc;
#[forbid(unsafe_code)]
pub mod tools;

/// True when running as root (effective uid 0).
pub fn is_root() -> bool {
    rustix::process::geteuid().is_root()
}

/// The real user id of this process.
pub fn uid() -> u32 {
    rustix::process::getuid().as_raw()
}

/// The effective user id of this process.
pub fn euid() -> u32 {
    rustix::process::geteuid().as_raw()
}

/// The running kernel's release (`6.18.44-...`).
pub fn kernel_release() -> String {
    rustix::system::uname()
        .release()
        .to_string_lossy()
        .into_owned()
}

/// uname's nodename (no NSS, no DNS): what `hostname` prints.
pub fn hostname() -> String {
    rustix::system::uname()
        .nodename()
        .to_string_lossy()
        .into_owned()
}

/// Writes nothing to stdout (`write(1, "", 0)`): the error a closed or
/// failed stdout gives (EPIPE, EIO), without writing a byte.
pub fn stdout_writable() -> std::io::Result<()> {
    use std::os::fd::AsFd;
    rustix::io::write(std::io::stdout().as_fd(), &[])
        .map(|_| ())
        .map_err(Into::into)
}
