//! The kernel's calls: ioctls (btrfs through btrfs-uapi, loop, FIEMAP, NVMe admin,
//! inode flags, balance), memory and I/O syscalls (huge pages, mincore, preadv2,
//! process_vm_readv), O_DIRECT, leases, xattrs, page-cache advice and signals.
//! The crate's `unsafe` lives here, each block with a SAFETY comment.

pub(crate) mod balance;
pub mod btrfs;
pub(crate) mod child;
pub(crate) mod direct_io;
pub mod errno;
pub(crate) mod extents;
pub mod hugepages;
pub mod ioctl;
pub(crate) mod lease;
pub(crate) mod measure;
pub mod memcg;
pub mod memio;
pub(crate) mod nvme;
pub(crate) mod pagecache;
pub mod scrub;
pub mod settings;
pub mod signals;
pub(crate) mod xattrs;
