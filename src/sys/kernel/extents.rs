//! How a file's bytes are stored: `FS_IOC_FIEMAP` (linux/fiemap.h), with the
//! extent flags btrfs-uapi's `file_extents` does not expose (ENCODED for
//! compressed btrfs extents, UNWRITTEN, DATA_INLINE).
//!
//! The struct layouts, request number and safe wrapper stay together here.
#![allow(unsafe_code)]

use std::fs::File;
use std::os::fd::AsRawFd;

use nix::errno::Errno;
use serde::{Deserialize, Serialize};

/// `struct fiemap` (the header before the extent array).
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct Fiemap {
    fm_start: u64,
    fm_length: u64,
    fm_flags: u32,
    fm_mapped_extents: u32,
    fm_extent_count: u32,
    fm_reserved: u32,
}

/// `struct fiemap_extent`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct FiemapExtent {
    fe_logical: u64,
    fe_physical: u64,
    fe_length: u64,
    fe_reserved64: [u64; 2],
    fe_flags: u32,
    fe_reserved: [u32; 3],
}

const BATCH: usize = 128;

/// The header followed by room for `BATCH` extents, as the ioctl expects.
#[repr(C)]
struct FiemapRequest {
    header: Fiemap,
    extents: [FiemapExtent; BATCH],
}

/// Sync the file before mapping it, so delayed allocation is resolved.
const FIEMAP_FLAG_SYNC: u32 = 0x1;
const FIEMAP_EXTENT_LAST: u32 = 0x1;
const FIEMAP_EXTENT_DELALLOC: u32 = 0x4;
/// Data is encoded (compressed): btrfs serves O_DIRECT reads of it through
/// the page cache.
const FIEMAP_EXTENT_ENCODED: u32 = 0x8;
const FIEMAP_EXTENT_DATA_INLINE: u32 = 0x200;
const FIEMAP_EXTENT_UNWRITTEN: u32 = 0x800;

// _IOWR('f', 11, struct fiemap): the size in the number is the header's.
const FS_IOC_FIEMAP: u64 = 0xC020_660B;
nix::ioctl_readwrite_bad!(fiemap_raw, FS_IOC_FIEMAP, FiemapRequest);

/// Where a file's bytes come from when it is read, by kind. Bytes that are
/// not in a plain extent (holes, unwritten, inline, compressed) can be read
/// without the device moving as many bytes.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema,
)]
pub struct Layout {
    /// Number of extents.
    pub extents: u64,
    /// Bytes covered by extents (up to the file size).
    pub(crate) mapped_bytes: u64,
    /// Bytes in compressed (encoded) extents.
    pub encoded_bytes: u64,
    /// Bytes in preallocated, never-written extents (read as zeros).
    pub unwritten_bytes: u64,
    /// Bytes stored inline in metadata.
    pub(crate) inline_bytes: u64,
    /// Bytes in holes (read as zeros, no extent at all).
    pub hole_bytes: u64,
    /// Bytes in extents not yet allocated (dirty, not written back).
    pub(crate) delalloc_bytes: u64,
}

/// Maps the first `size` bytes of `file`. ENOTTY/EOPNOTSUPP mean the
/// filesystem has no FIEMAP (tmpfs, NFS).
pub fn layout(file: &File, size: u64) -> Result<Layout, Errno> {
    let mut out = Layout::default();
    walk(file, size, |e, _, len| {
        out.extents += 1;
        out.mapped_bytes += len;
        if e.fe_flags & FIEMAP_EXTENT_ENCODED != 0 {
            out.encoded_bytes += len;
        }
        if e.fe_flags & FIEMAP_EXTENT_UNWRITTEN != 0 {
            out.unwritten_bytes += len;
        }
        if e.fe_flags & FIEMAP_EXTENT_DATA_INLINE != 0 {
            out.inline_bytes += len;
        }
        if e.fe_flags & FIEMAP_EXTENT_DELALLOC != 0 {
            out.delalloc_bytes += len;
        }
    })?;
    out.hole_bytes = size.saturating_sub(out.mapped_bytes);
    Ok(out)
}

/// The filesystem addresses of the first `size` bytes of `file`: each
/// extent's `fe_physical` (on btrfs a logical address of the filesystem,
/// which the chunk tree maps to devices) and its length. Inline, delalloc
/// and encoded extents are left out (no address, or not one of the file's
/// bytes per byte).
pub fn physical_extents(file: &File, size: u64) -> Result<Vec<(u64, u64)>, Errno> {
    let mut out = Vec::new();
    let skip = FIEMAP_EXTENT_DATA_INLINE | FIEMAP_EXTENT_DELALLOC | FIEMAP_EXTENT_ENCODED;
    walk(file, size, |e, begin, len| {
        if e.fe_flags & skip == 0 && len > 0 {
            out.push((e.fe_physical + (begin - e.fe_logical), len));
        }
    })?;
    Ok(out)
}

/// FIEMAP_EXTENT_SHARED: the extent is shared with another file or snapshot.
const FIEMAP_EXTENT_SHARED: u32 = 0x2000;

/// One extent of a file as FIEMAP reports it, clipped to the file size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Extent {
    /// First byte of the file it holds.
    pub file_offset: u64,
    /// Bytes of the file it holds (after clipping).
    pub length: u64,
    /// On btrfs the filesystem (logical) address of `file_offset`'s byte;
    /// for an encoded extent the address where its disk extent begins
    /// (FIEMAP gives no on-disk length for it).
    pub address: u64,
    /// Compressed (or otherwise encoded): `address` is the disk extent's start.
    pub encoded: bool,
    /// Stored inline in metadata (no address).
    pub inline: bool,
    /// Preallocated, never written (reads as zeros).
    pub unwritten: bool,
    /// Not yet allocated (dirty, not written back).
    pub delalloc: bool,
    /// Shared with another file or a snapshot.
    pub shared: bool,
}

/// Calls `each` for every extent of the first `size` bytes of `file`, in
/// file order, without collecting them (a file may have millions).
pub fn for_each_extent(file: &File, size: u64, mut each: impl FnMut(&Extent)) -> Result<(), Errno> {
    walk(file, size, |e, begin, len| {
        if len == 0 {
            return;
        }
        let encoded = e.fe_flags & FIEMAP_EXTENT_ENCODED != 0;
        let address = if encoded {
            e.fe_physical
        } else {
            e.fe_physical + (begin - e.fe_logical)
        };
        each(&Extent {
            file_offset: begin,
            length: len,
            address,
            encoded,
            inline: e.fe_flags & FIEMAP_EXTENT_DATA_INLINE != 0,
            unwritten: e.fe_flags & FIEMAP_EXTENT_UNWRITTEN != 0,
            delalloc: e.fe_flags & FIEMAP_EXTENT_DELALLOC != 0,
            shared: e.fe_flags & FIEMAP_EXTENT_SHARED != 0,
        });
    })
}

/// Calls `each(extent, first file offset used, bytes used)` for every
/// extent, clipped to the first `size` bytes.
fn walk(
    file: &File,
    size: u64,
    mut each: impl FnMut(&FiemapExtent, u64, u64),
) -> Result<(), Errno> {
    let mut start = 0u64;
    let mut flags = FIEMAP_FLAG_SYNC;
    'outer: while start < size {
        let mut req = FiemapRequest {
            header: Fiemap {
                fm_start: start,
                fm_length: size - start,
                fm_flags: flags,
                fm_extent_count: BATCH as u32,
                ..Fiemap::default()
            },
            extents: [FiemapExtent::default(); BATCH],
        };
        // SAFETY: `req` is a header followed by fm_extent_count extent
        // slots, exactly what FS_IOC_FIEMAP reads and fills; it lives for
        // the call.
        unsafe { fiemap_raw(file.as_raw_fd(), &mut req) }?;
        flags = 0;
        let n = (req.header.fm_mapped_extents as usize).min(BATCH);
        if n == 0 {
            break;
        }
        for e in &req.extents[..n] {
            let begin = e.fe_logical.max(start);
            let end = e.fe_logical.saturating_add(e.fe_length).min(size);
            each(e, begin, end.saturating_sub(begin));
            start = start.max(e.fe_logical.saturating_add(e.fe_length));
            if e.fe_flags & FIEMAP_EXTENT_LAST != 0 {
                break 'outer;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn struct_layouts_match_the_kernel() {
        assert_eq!(std::mem::size_of::<Fiemap>(), 32);
        assert_eq!(std::mem::size_of::<FiemapExtent>(), 56);
    }

    #[test]
    fn sparse_file_has_holes() {
        let mut f = tempfile::tempfile_in("/var/tmp").unwrap();
        f.write_all(&[7u8; 8192]).unwrap();
        f.set_len(1 << 20).unwrap();
        match layout(&f, 1 << 20) {
            Ok(l) => {
                assert!(l.mapped_bytes >= 8192, "{l:?}");
                assert!(l.hole_bytes >= (1 << 20) - 65536, "{l:?}");
                assert_eq!(l.mapped_bytes + l.hole_bytes, 1 << 20);
            }
            // /var/tmp on a filesystem without FIEMAP: nothing to check.
            Err(Errno::EOPNOTSUPP | Errno::ENOTTY) => {}
            Err(e) => panic!("{e}"),
        }
        assert_eq!(layout(&f, 0).unwrap(), Layout::default());
    }
}
