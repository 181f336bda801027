//! What a member device's own superblock says: whose member it is and the
//! generation it last saw. A member that was gone while the filesystem
//! committed carries an older generation than the others (it missed those
//! transactions) until a mount writes it again.

use std::fs::OpenOptions;
use std::os::unix::fs::{FileExt, FileTypeExt, OpenOptionsExt};
use std::path::Path;

use btrfs_disk::superblock::{read_superblock_at, superblock_is_valid};

/// Where the primary superblock is, and its size (BTRFS_SUPER_INFO_*).
const SUPER_INFO_OFFSET: u64 = 64 * 1024;
const SUPER_INFO_SIZE: usize = 4096;

/// The fields of a member's primary superblock that say which member it is
/// and how current.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct MemberSuper {
    /// The filesystem's UUID.
    pub fsid: String,
    /// The member's device id.
    pub devid: u64,
    /// The member's UUID.
    pub dev_uuid: String,
    /// The last transaction written to this member.
    pub generation: u64,
}

/// What a block device's primary superblock says. `None` when `path` is not
/// a block device, cannot be read, or holds no valid btrfs superblock (a
/// checksum that fails is no superblock). Read with `O_DIRECT`, so the
/// device is read, not what its page cache held from before.
pub(crate) fn read_member_super(path: &Path) -> Option<MemberSuper> {
    let f = OpenOptions::new()
        .read(true)
        // The path is the one the kernel names for the member, in /dev,
        // which root holds; /dev/mapper/NAME is a link to ../dm-N, so
        // links are followed (anything but a block device is refused
        // below).
        .custom_flags(libc::O_CLOEXEC | libc::O_DIRECT)
        .open(path)
        .ok()?;
    if !f.metadata().ok()?.file_type().is_block_device() {
        return None;
    }
    // An aligned window of a plain buffer: O_DIRECT wants the memory, the
    // offset and the length aligned to the logical block size (4 KiB
    // covers every one in use).
    const ALIGN: usize = 4096;
    let mut buf = vec![0u8; SUPER_INFO_SIZE + ALIGN];
    let start = buf.as_ptr().align_offset(ALIGN);
    let window = &mut buf[start..start + SUPER_INFO_SIZE];
    f.read_exact_at(window, SUPER_INFO_OFFSET).ok()?;
    parse(window)
}

/// The member fields of a raw primary superblock, when it is valid.
pub(crate) fn parse(raw: &[u8]) -> Option<MemberSuper> {
    let raw: &[u8; SUPER_INFO_SIZE] = raw.try_into().ok()?;
    if !superblock_is_valid(raw) {
        return None;
    }
    let sb = read_superblock_at(&mut std::io::Cursor::new(&raw[..]), 0).ok()?;
    Some(MemberSuper {
        fsid: sb.fsid.hyphenated().to_string(),
        devid: sb.dev_item.devid,
        dev_uuid: sb.dev_item.uuid.hyphenated().to_string(),
        generation: sb.generation,
    })
}

/// What a member's block device says now, beside the kernel's view.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct BlockSeen {
    /// The block device the kernel names is gone: no such node, or it
    /// now holds another filesystem's or another member's superblock.
    pub gone: bool,
    /// The generation in its superblock, when it is this member's.
    pub generation: Option<u64>,
}

/// Looks at the block device the kernel names for member `devid` of
/// `fsid`. A node that exists but cannot be read is not called gone (a
/// device busy or failing is for the error counters to say).
pub(crate) fn look(path: &Path, fsid: &str, devid: u64) -> BlockSeen {
    match std::fs::metadata(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return BlockSeen {
                gone: true,
                generation: None,
            };
        }
        Err(_) => return BlockSeen::default(),
        Ok(_) => {}
    }
    match read_member_super(path) {
        Some(sb) if sb.fsid == fsid && sb.devid == devid => BlockSeen {
            gone: false,
            generation: Some(sb.generation),
        },
        Some(_) => BlockSeen {
            gone: true,
            generation: None,
        },
        None => BlockSeen::default(),
    }
}
