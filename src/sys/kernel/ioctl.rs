//! The raw ioctls btrfs-lab issues itself (loop devices, inode flags).
//!
//! This is the only module of the crate allowed to use `unsafe`: each ioctl
//! keeps its request number, struct layout and a safe wrapper together, in the
//! style of python-btrfs. btrfs ioctls go through the `btrfs-uapi` crate.
#![allow(unsafe_code)]

use btrfs_uapi::balance::BalanceFlags;
pub use btrfs_uapi::balance::BalanceState;
use std::os::fd::{AsRawFd, BorrowedFd};

use nix::errno::Errno;

// ---------------------------------------------------------------- loop devices
// <linux/loop.h>

/// `LOOP_SET_FD`-era flag: the loop device bypasses the backing file's page cache.
pub(crate) const LO_FLAGS_DIRECT_IO: u32 = 16;
/// Flag: detach automatically on last close. btrfs-lab does not set it.
pub(crate) const LO_FLAGS_AUTOCLEAR: u32 = 4;

const LO_NAME_SIZE: usize = 64;
const LO_KEY_SIZE: usize = 32;

/// `struct loop_info64` from <linux/loop.h>.
#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct LoopInfo64 {
    pub(crate) lo_device: u64,
    pub(crate) lo_inode: u64,
    pub(crate) lo_rdevice: u64,
    pub(crate) lo_offset: u64,
    pub(crate) lo_sizelimit: u64,
    pub(crate) lo_number: u32,
    pub(crate) lo_encrypt_type: u32,
    pub(crate) lo_encrypt_key_size: u32,
    pub(crate) lo_flags: u32,
    pub(crate) lo_file_name: [u8; LO_NAME_SIZE],
    pub(crate) lo_crypt_name: [u8; LO_NAME_SIZE],
    pub(crate) lo_encrypt_key: [u8; LO_KEY_SIZE],
    pub(crate) lo_init: [u64; 2],
}

impl Default for LoopInfo64 {
    fn default() -> Self {
        Self {
            lo_device: 0,
            lo_inode: 0,
            lo_rdevice: 0,
            lo_offset: 0,
            lo_sizelimit: 0,
            lo_number: 0,
            lo_encrypt_type: 0,
            lo_encrypt_key_size: 0,
            lo_flags: 0,
            lo_file_name: [0; LO_NAME_SIZE],
            lo_crypt_name: [0; LO_NAME_SIZE],
            lo_encrypt_key: [0; LO_KEY_SIZE],
            lo_init: [0; 2],
        }
    }
}

/// `struct loop_config` from <linux/loop.h> (LOOP_CONFIGURE, Linux 5.8).
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub(crate) struct LoopConfig {
    pub fd: u32,
    pub block_size: u32,
    pub info: LoopInfo64,
    pub(crate) reserved: [u64; 8],
}

const LOOP_CLR_FD: u64 = 0x4C01;
const LOOP_SET_STATUS64: u64 = 0x4C04;
const LOOP_GET_STATUS64: u64 = 0x4C05;
const LOOP_CONFIGURE: u64 = 0x4C0A;
const LOOP_CTL_GET_FREE: u64 = 0x4C82;

/// The raw ioctls nix's macros generate (`pub unsafe fn`s): kept in a
/// private module so only this file's safe wrappers reach them.
mod raw {
    use super::*;
    nix::ioctl_write_ptr_bad!(loop_configure_raw, LOOP_CONFIGURE, LoopConfig);
    nix::ioctl_read_bad!(loop_get_status64_raw, LOOP_GET_STATUS64, LoopInfo64);
    nix::ioctl_write_ptr_bad!(loop_set_status64_raw, LOOP_SET_STATUS64, LoopInfo64);
    // BLKGETDISKSEQ = _IOR(0x12, 128, __u64) (Linux 5.15): a number the kernel
    // bumps each time a loop device is (re)attached.
    nix::ioctl_read!(blk_get_diskseq_raw, 0x12, 128, u64);
    nix::ioctl_none_bad!(loop_clr_fd_raw, LOOP_CLR_FD);
    nix::ioctl_none_bad!(loop_ctl_get_free_raw, LOOP_CTL_GET_FREE);
}
use raw::*;

/// Asks `/dev/loop-control` for the index of a free loop device (creating
/// one if needed).
pub(crate) fn loop_ctl_get_free(control: BorrowedFd<'_>) -> Result<u32, Errno> {
    // SAFETY: LOOP_CTL_GET_FREE takes no argument and returns an index.
    let n = unsafe { loop_ctl_get_free_raw(control.as_raw_fd()) }?;
    u32::try_from(n).map_err(|_| Errno::EINVAL)
}

/// Binds `backing` to the loop device `dev` in one step (LOOP_CONFIGURE).
pub(crate) fn loop_configure(
    dev: BorrowedFd<'_>,
    backing: BorrowedFd<'_>,
    flags: u32,
    file_name: &[u8],
) -> Result<(), Errno> {
    let mut config = LoopConfig {
        fd: u32::try_from(backing.as_raw_fd()).map_err(|_| Errno::EBADF)?,
        ..LoopConfig::default()
    };
    config.info.lo_flags = flags;
    let n = file_name.len().min(LO_NAME_SIZE - 1);
    config.info.lo_file_name[..n].copy_from_slice(&file_name[..n]);
    // SAFETY: `config` is a fully initialised loop_config that lives for the call.
    unsafe { loop_configure_raw(dev.as_raw_fd(), &config) }?;
    Ok(())
}

/// Reads a loop device's status: backing file identity and flags.
/// ENXIO means the device is not bound.
pub(crate) fn loop_get_status64(dev: BorrowedFd<'_>) -> Result<LoopInfo64, Errno> {
    let mut info = LoopInfo64::default();
    // SAFETY: the kernel fills `info`, which is a valid loop_info64.
    unsafe { loop_get_status64_raw(dev.as_raw_fd(), &mut info) }?;
    Ok(info)
}

/// Writes a loop device's status (only the settable flags, such as
/// `LO_FLAGS_AUTOCLEAR`, change for a bound device).
pub(crate) fn loop_set_status64(dev: BorrowedFd<'_>, info: &LoopInfo64) -> Result<(), Errno> {
    // SAFETY: `info` is a valid loop_info64 that lives for the call.
    unsafe { loop_set_status64_raw(dev.as_raw_fd(), info) }?;
    Ok(())
}

/// The disk sequence number of a block device (Linux 5.15): it changes each
/// time a loop device is attached, so it tells one binding from the next.
pub(crate) fn blk_get_diskseq(dev: BorrowedFd<'_>) -> Result<u64, Errno> {
    let mut seq: u64 = 0;
    // SAFETY: the kernel writes one u64 through the pointer.
    unsafe { blk_get_diskseq_raw(dev.as_raw_fd(), &raw mut seq) }?;
    Ok(seq)
}

/// Unbinds the loop device's backing file.
pub(crate) fn loop_clr_fd(dev: BorrowedFd<'_>) -> Result<(), Errno> {
    // SAFETY: LOOP_CLR_FD takes no argument.
    unsafe { loop_clr_fd_raw(dev.as_raw_fd()) }?;
    Ok(())
}

// ------------------------------------------------------------------ inode flags
// <linux/fs.h>: FS_IOC_GETFLAGS / FS_IOC_SETFLAGS (what lsattr and chattr use)

// Typed through rustix's `IFlags` (`FS_IOC_GETFLAGS`/`FS_IOC_SETFLAGS` are
// its `ioctl_getflags`/`ioctl_setflags`); the names below are the kernel's,
// with the letter lsattr shows.
pub use rustix::fs::IFlags;

/// `FS_NOCOW_FL` ('C' in lsattr): no copy-on-write, no data checksums.
pub const FS_NOCOW_FL: IFlags = IFlags::NOCOW;
/// `FS_COMPR_FL` ('c' in lsattr): compress data.
pub const FS_COMPR_FL: IFlags = IFlags::COMPRESSED;
/// `FS_SYNC_FL` ('S'): synchronous updates.
pub(crate) const FS_SYNC_FL: IFlags = IFlags::SYNC;
/// `FS_IMMUTABLE_FL` ('i'): the file cannot be changed, renamed or replaced.
pub(crate) const FS_IMMUTABLE_FL: IFlags = IFlags::IMMUTABLE;
/// `FS_APPEND_FL` ('a'): append only; cannot be replaced.
pub(crate) const FS_APPEND_FL: IFlags = IFlags::APPEND;
/// `FS_NODUMP_FL` ('d'): skipped by dump.
pub(crate) const FS_NODUMP_FL: IFlags = IFlags::NODUMP;
/// `FS_NOATIME_FL` ('A'): no atime updates.
pub(crate) const FS_NOATIME_FL: IFlags = IFlags::NOATIME;
/// `FS_NOCOMP_FL` ('m'): never compress (rustix has no name for it).
pub(crate) const FS_NOCOMP_FL: IFlags = IFlags::from_bits_retain(0x0000_0400);

/// Reads the inode flags of an open file or directory.
pub(crate) fn get_inode_flags(fd: BorrowedFd<'_>) -> Result<IFlags, Errno> {
    rustix::fs::ioctl_getflags(fd).map_err(super::errno::to_nix)
}

/// Sets the inode flags of an open file or directory.
pub(crate) fn set_inode_flags(fd: BorrowedFd<'_>, flags: IFlags) -> Result<(), Errno> {
    rustix::fs::ioctl_setflags(fd, flags).map_err(super::errno::to_nix)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn struct_layouts_match_the_kernel() {
        assert_eq!(std::mem::size_of::<LoopInfo64>(), 232);
        assert_eq!(std::mem::size_of::<LoopConfig>(), 304);
    }
}

// ------------------------------------------------------------------ balance
// BTRFS_IOC_BALANCE_PROGRESS returns the running (or paused) balance's whole
// arguments, targets included; btrfs-uapi keeps only the counters.

/// A balance as the kernel reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BalanceStatus {
    /// Running, pause requested, cancel requested (btrfs-uapi's typed bits).
    pub state: BalanceState,
    /// BTRFS_BALANCE_* flags (data 1, system 2, metadata 4, force 8).
    pub flags: u64,
    /// Convert target of data (block-group profile bits), if converting.
    pub data_target: Option<u64>,
    /// Convert target of metadata.
    pub(crate) meta_target: Option<u64>,
    /// Convert target of system.
    pub(crate) sys_target: Option<u64>,
    /// Chunks expected to be relocated.
    pub expected: u64,
    /// Chunks considered.
    pub(crate) considered: u64,
    /// Chunks relocated.
    pub completed: u64,
}

/// The current balance, `None` when there is none (ENOTCONN).
pub fn balance_status(fd: BorrowedFd<'_>) -> Result<Option<BalanceStatus>, Errno> {
    use btrfs_uapi::raw::{btrfs_ioc_balance_progress, btrfs_ioctl_balance_args};
    // SAFETY: all-zero is a valid btrfs_ioctl_balance_args (plain integers).
    let mut args: btrfs_ioctl_balance_args = unsafe { std::mem::zeroed() };
    // SAFETY: the kernel fills `args`, which lives for the call.
    match unsafe { btrfs_ioc_balance_progress(fd.as_raw_fd(), &raw mut args) } {
        Ok(_) => {}
        Err(Errno::ENOTCONN) => return Ok(None),
        Err(e) => return Err(e),
    }
    // The per-type args are packed: copy fields out by value.
    let target = |flags: u64, target: u64| {
        (flags & btrfs_uapi::balance::BalanceArgsFlags::CONVERT.bits() != 0).then_some(target)
    };
    Ok(Some(BalanceStatus {
        state: BalanceState::from_bits_retain(args.state),
        flags: args.flags,
        data_target: target(args.data.flags, args.data.target),
        meta_target: target(args.meta.flags, args.meta.target),
        sys_target: target(args.sys.flags, args.sys.target),
        expected: args.stat.expected,
        considered: args.stat.considered,
        completed: args.stat.completed,
    }))
}

/// How a BALANCE_V2 call ended, as the kernel returned it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BalanceEnd {
    /// Returned 0: the balance finished. The counters as the kernel copied
    /// them back (expected, completed).
    Finished {
        /// Chunks expected.
        expected: u64,
        /// Chunks relocated.
        completed: u64,
    },
    /// Returned a positive `btrfs_err_code` (e.g. 6,
    /// BTRFS_ERROR_DEV_EXCL_RUN_IN_PROGRESS: another exclusive operation runs).
    BtrfsError(i32),
}

/// One chunk type's filters in a balance, as `btrfs balance start -d...`
/// spells them (the kernel's `struct btrfs_balance_args`); a chunk is
/// relocated when every filter given matches it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TypeFilter {
    /// `profiles=`: chunks of these block-group profile bits.
    pub profiles: Option<u64>,
    /// `convert=`: to these profile bits, `soft` (skipping the chunks
    /// already in them).
    pub convert: Option<u64>,
    /// `usage=N`: chunks less than N percent used.
    pub usage: Option<u8>,
    /// `devid=`: chunks with a stripe on this device.
    pub devid: Option<u64>,
    /// `stripes=MIN..MAX`: chunks with that many stripes.
    pub stripes: Option<(u32, u32)>,
    /// `limit=`: at most this many chunks.
    pub limit: Option<u64>,
}

impl TypeFilter {
    fn fill(&self, a: &mut btrfs_uapi::raw::btrfs_balance_args) {
        use btrfs_uapi::balance::BalanceArgsFlags as F;
        // btrfs-uapi's builder keeps its raw struct private: the fields
        // are set here, with its flag constants.
        let mut flags = F::empty();
        if let Some(p) = self.profiles {
            a.profiles = p;
            flags |= F::PROFILES;
        }
        if let Some(t) = self.convert {
            a.target = t;
            flags |= F::CONVERT | F::SOFT;
        }
        if let Some(u) = self.usage {
            a.__bindgen_anon_1.usage = u64::from(u.min(100));
            flags |= F::USAGE;
        }
        if let Some(d) = self.devid {
            a.devid = d;
            flags |= F::DEVID;
        }
        if let Some((min, max)) = self.stripes {
            a.stripes_min = min;
            a.stripes_max = max;
            flags |= F::STRIPES_RANGE;
        }
        if let Some(l) = self.limit {
            a.__bindgen_anon_2.limit = l;
            flags |= F::LIMIT;
        }
        a.flags = flags.bits();
    }
}

/// A new balance: the types it relocates, each with its filters (`None`:
/// the type is left alone; a type given with no filter relocates all its
/// chunks).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct BalanceArgs {
    /// Data chunks.
    pub data: Option<TypeFilter>,
    /// Metadata chunks.
    pub metadata: Option<TypeFilter>,
    /// System chunks (the kernel refuses them alone without `force`).
    pub system: Option<TypeFilter>,
    /// Allowed to lower redundancy (`-f`).
    pub force: bool,
}

/// Runs BTRFS_IOC_BALANCE_V2: a new balance with `args`, or (`None`) a
/// resume of the paused one. Blocks until the balance ends;
/// `Err(ECANCELED)` when it was paused or cancelled, `Err(EINVAL)` for a
/// balance of no type. Unlike `btrfs_uapi::balance::balance` this keeps
/// the kernel's positive return codes, which are failures.
pub(crate) fn balance_v2(
    fd: BorrowedFd<'_>,
    args: Option<&BalanceArgs>,
) -> Result<BalanceEnd, Errno> {
    use btrfs_uapi::raw::btrfs_ioctl_balance_args;
    // SAFETY: all-zero is a valid btrfs_ioctl_balance_args (plain integers).
    let mut raw: btrfs_ioctl_balance_args = unsafe { std::mem::zeroed() };
    let Some(args) = args else {
        raw.flags = BalanceFlags::RESUME.bits();
        return run_balance_v2(fd, raw);
    };
    if let Some(f) = &args.data {
        raw.flags |= BalanceFlags::DATA.bits();
        f.fill(&mut raw.data);
    }
    if let Some(f) = &args.metadata {
        raw.flags |= BalanceFlags::METADATA.bits();
        f.fill(&mut raw.meta);
    }
    if let Some(f) = &args.system {
        raw.flags |= BalanceFlags::SYSTEM.bits();
        f.fill(&mut raw.sys);
    }
    if raw.flags == 0 {
        return Err(Errno::EINVAL);
    }
    if args.force {
        raw.flags |= BalanceFlags::FORCE.bits();
    }
    run_balance_v2(fd, raw)
}

/// BTRFS_IOC_BALANCE_V2 with `args`: blocks until the balance ends; a
/// positive return is the kernel's `btrfs_err_code`.
fn run_balance_v2(
    fd: BorrowedFd<'_>,
    mut args: btrfs_uapi::raw::btrfs_ioctl_balance_args,
) -> Result<BalanceEnd, Errno> {
    use btrfs_uapi::raw::btrfs_ioc_balance_v2;
    // SAFETY: `args` is a valid btrfs_ioctl_balance_args that lives for the
    // call; the kernel reads it and writes the counters back.
    let ret = unsafe { btrfs_ioc_balance_v2(fd.as_raw_fd(), &raw mut args) }?;
    if ret > 0 {
        return Ok(BalanceEnd::BtrfsError(ret));
    }
    let stat = args.stat;
    Ok(BalanceEnd::Finished {
        expected: stat.expected,
        completed: stat.completed,
    })
}

/// BTRFS_IOC_BALANCE_CTL: pause (blocks until the balance stopped after its
/// current chunk) or cancel. ENOTCONN: no balance runs.
pub(crate) fn balance_ctl(fd: BorrowedFd<'_>, pause: bool) -> Result<(), Errno> {
    use btrfs_uapi::raw::btrfs_ioc_balance_ctl;
    // BTRFS_BALANCE_CTL_PAUSE 1, BTRFS_BALANCE_CTL_CANCEL 2.
    let cmd: u64 = if pause { 1 } else { 2 };
    // SAFETY: BALANCE_CTL takes an integer argument.
    unsafe { btrfs_ioc_balance_ctl(fd.as_raw_fd(), cmd) }?;
    Ok(())
}

// ---------------------------------------------------------------- scrub
// BTRFS_IOC_SCRUB with a start offset: btrfs-uapi's `scrub_start` always
// starts at 0, a resumed scrub starts where the last one stopped (as
// btrfs-progs' `scrub resume` passes `start = last_physical`).

/// Scrubs device `devid` of the filesystem `fd` is open on, from physical
/// byte `start` to the end; blocks until it is done or cancelled
/// (`ECANCELED`): the counters, and whether it was cancelled.
pub fn scrub_device(
    fd: BorrowedFd<'_>,
    devid: u64,
    start: u64,
    readonly: bool,
) -> std::result::Result<(btrfs_uapi::scrub::ScrubProgress, bool), Errno> {
    use btrfs_uapi::raw::{BTRFS_SCRUB_READONLY, btrfs_ioc_scrub, btrfs_ioctl_scrub_args};
    // SAFETY: btrfs_ioctl_scrub_args is a plain C struct of integers, for
    // which all-zero bytes are a valid value.
    let mut args: btrfs_ioctl_scrub_args = unsafe { std::mem::zeroed() };
    args.devid = devid;
    args.start = start;
    args.end = u64::MAX;
    if readonly {
        args.flags = u64::from(BTRFS_SCRUB_READONLY);
    }
    // SAFETY: `fd` is an open descriptor for the whole call, `args` is a
    // valid, exclusively borrowed btrfs_ioctl_scrub_args of the size the
    // request number encodes; the kernel writes only inside it.
    let cancelled = match unsafe { btrfs_ioc_scrub(fd.as_raw_fd(), &raw mut args) } {
        Ok(_) => false,
        // The kernel copies the counters back on a cancel too.
        Err(Errno::ECANCELED) => true,
        Err(e) => return Err(e),
    };
    let p = &args.progress;
    let progress = btrfs_uapi::scrub::ScrubProgress {
        data_extents_scrubbed: p.data_extents_scrubbed,
        tree_extents_scrubbed: p.tree_extents_scrubbed,
        data_bytes_scrubbed: p.data_bytes_scrubbed,
        tree_bytes_scrubbed: p.tree_bytes_scrubbed,
        read_errors: p.read_errors,
        csum_errors: p.csum_errors,
        verify_errors: p.verify_errors,
        no_csum: p.no_csum,
        csum_discards: p.csum_discards,
        super_errors: p.super_errors,
        malloc_errors: p.malloc_errors,
        uncorrectable_errors: p.uncorrectable_errors,
        corrected_errors: p.corrected_errors,
        last_physical: p.last_physical,
        unverified_errors: p.unverified_errors,
    };
    Ok((progress, cancelled))
}

/// How a usage-filtered balance (reclaim's step)
/// ended, its errno read here: the job that runs it names no errno type.
#[derive(Debug)]
pub(crate) enum UsageBalanceEnd {
    /// The kernel answered: finished, or a `btrfs_err_code`.
    Ended(BalanceEnd),
    /// Paused or cancelled (`ECANCELED`).
    Cancelled,
    /// No room to relocate into (`ENOSPC`).
    NoSpace,
    /// Another balance started at the same moment (`EINPROGRESS`).
    AnotherBalance,
    /// Any other errno, for the caller's error.
    Failed(Errno),
}

impl UsageBalanceEnd {
    /// What [`balance_v2`] returned.
    pub(crate) fn of(r: Result<BalanceEnd, Errno>) -> Self {
        match r {
            Ok(end) => Self::Ended(end),
            Err(Errno::ECANCELED) => Self::Cancelled,
            Err(Errno::ENOSPC) => Self::NoSpace,
            Err(Errno::EINPROGRESS) => Self::AnotherBalance,
            Err(e) => Self::Failed(e),
        }
    }

    /// The thread that ran the balance went away without an answer (`EIO`).
    pub(crate) fn lost() -> Self {
        Self::Failed(Errno::EIO)
    }
}
