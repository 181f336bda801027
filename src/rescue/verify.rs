//! Every sector `rescue` copies checked against btrfs' own data checksums
//! (the checksum tree), by rescue itself and not only by the kernel's read
//! path: on 6.18 a sector whose read had failed its checksum was returned
//! by the next read without EIO (tests/it/rescue.rs), and a copy that
//! trusted the read would be corrupt while called good.
//!
//! What cannot be checked this way is said so: compressed extents (their
//! checksums cover the compressed bytes), inline data (in the metadata,
//! checked with its leaf), preallocated ranges and files without checksums
//! (NOCOW), and a filesystem whose checksum algorithm is unknown here.

use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};

use btrfs_disk::superblock::ChecksumType;

use crate::error::Result;
use crate::sys::fs::root::SysRoot;
use crate::sys::kernel::btrfs::{self, CsumItem};
use crate::sys::kernel::extents::Extent;

/// Logical bytes whose checksums one search loads.
const WINDOW: u64 = 256 << 20;

/// The checksum algorithm of a filesystem, as sysfs names it
/// (`/sys/fs/btrfs/FSID/checksum`: `crc32c (crc32c-lib)`).
pub(crate) fn algorithm(sysfs_value: &str) -> Option<ChecksumType> {
    match sysfs_value.split_whitespace().next()? {
        "crc32c" => Some(ChecksumType::Crc32),
        "xxhash64" | "xxhash" => Some(ChecksumType::Xxhash),
        "sha256" => Some(ChecksumType::Sha256),
        "blake2b" | "blake2b-256" | "blake2" => Some(ChecksumType::Blake2),
        _ => None,
    }
}

/// The data checksums of a filesystem, loaded a window at a time.
pub(crate) struct Csums {
    fd: OwnedFd,
    path: PathBuf,
    kind: ChecksumType,
    size: usize,
    sector: u64,
    /// The most logical bytes one checksum item can cover (a leaf full of
    /// one item's checksums).
    span: u64,
    window: Option<(u64, u64)>,
    items: Vec<CsumItem>,
}

/// What one sector's check found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Check {
    /// Its bytes match btrfs' checksum.
    Verified,
    /// They do not: not the data btrfs wrote.
    Mismatch,
    /// Nothing to check it against (see the module documentation).
    Unchecked,
}

impl Csums {
    /// The checksums of the filesystem `fd` is on; `Err(why)` (a sentence)
    /// when they cannot be checked here.
    pub(crate) fn open(
        fd: &impl AsFd,
        path: &Path,
        fsid: &str,
    ) -> std::result::Result<Self, String> {
        let sys = SysRoot::host();
        let value = sys
            .read_attr(&sys.sys(&format!("fs/btrfs/{fsid}/checksum")))
            .map_err(|e| format!("its checksum algorithm is unknown (sysfs: {e})"))?;
        let kind = algorithm(&value).ok_or_else(|| {
            format!(
                "its checksum algorithm {:?} is not known here",
                value.trim()
            )
        })?;
        let info = btrfs_uapi::filesystem::filesystem_info(fd.as_fd())
            .map_err(|e| format!("FS_INFO failed: {}", e.desc()))?;
        let fd = fd
            .as_fd()
            .try_clone_to_owned()
            .map_err(|e| format!("cannot duplicate the descriptor: {e}"))?;
        let size = kind.size();
        let sector = u64::from(info.sectorsize.max(512));
        Ok(Self {
            fd,
            path: path.to_path_buf(),
            kind,
            size,
            sector,
            span: (u64::from(info.nodesize) / size as u64 + 1) * sector,
            window: None,
            items: Vec::new(),
        })
    }

    /// The sector size the checksums are per.
    pub(crate) fn sector(&self) -> u64 {
        self.sector
    }

    /// The checksum btrfs keeps of the sector at `logical`, if any.
    fn expected(&mut self, logical: u64) -> Result<Option<&[u8]>> {
        if !self
            .window
            .is_some_and(|(lo, hi)| (lo..hi).contains(&logical))
        {
            let lo = logical;
            let hi = logical.saturating_add(WINDOW);
            self.items = btrfs::csum_items_of(
                self.fd.as_fd(),
                lo.saturating_sub(self.span),
                hi,
                &self.path,
            )?
            .unwrap_or_default();
            self.window = Some((lo, hi));
        }
        let i = self.items.partition_point(|it| it.logical <= logical);
        let Some(item) = i.checked_sub(1).map(|i| &self.items[i]) else {
            return Ok(None);
        };
        let at = ((logical - item.logical) / self.sector) as usize * self.size;
        Ok(item.sums.get(at..at + self.size))
    }

    /// Checks the bytes of the file's sector at `file_offset` (a sector, or
    /// the file's last, shorter one) against the checksum of where
    /// `extents` put it.
    pub(crate) fn check(
        &mut self,
        extents: &[Extent],
        file_offset: u64,
        data: &[u8],
    ) -> Result<Check> {
        let i = extents.partition_point(|e| e.file_offset <= file_offset);
        let Some(e) = i.checked_sub(1).map(|i| &extents[i]) else {
            return Ok(Check::Unchecked);
        };
        if file_offset >= e.file_offset + e.length
            || e.encoded
            || e.inline
            || e.unwritten
            || e.delalloc
        {
            return Ok(Check::Unchecked);
        }
        let logical = e.address + (file_offset - e.file_offset);
        if !logical.is_multiple_of(self.sector) {
            return Ok(Check::Unchecked);
        }
        let kind = self.kind;
        let sector = self.sector as usize;
        let Some(want) = self.expected(logical)? else {
            return Ok(Check::Unchecked);
        };
        // The last sector is checksummed whole, zeros after the end of file.
        let sum = if data.len() < sector {
            let mut full = data.to_vec();
            full.resize(sector, 0);
            kind.compute(&full)
        } else {
            kind.compute(data)
        };
        Ok(if sum.get(..want.len()) == Some(want) {
            Check::Verified
        } else {
            Check::Mismatch
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn algorithms_as_sysfs_names_them() {
        assert_eq!(
            algorithm("crc32c (crc32c-lib)\n"),
            Some(ChecksumType::Crc32)
        );
        assert_eq!(
            algorithm("crc32c (crc32c-intel)"),
            Some(ChecksumType::Crc32)
        );
        assert_eq!(
            algorithm("xxhash64 (xxhash64-generic)"),
            Some(ChecksumType::Xxhash)
        );
        assert_eq!(
            algorithm("sha256 (sha256-avx2)"),
            Some(ChecksumType::Sha256)
        );
        assert_eq!(
            algorithm("blake2b (blake2b-256-generic)"),
            Some(ChecksumType::Blake2)
        );
        assert_eq!(algorithm("md5 (md5-generic)"), None);
        assert_eq!(algorithm(""), None);
    }

    #[test]
    fn crc32c_is_the_one_btrfs_writes() {
        // Linux 6.18, a 4 KiB sector of 0x5a bytes read back from a file:
        // "BTRFS warning (device loop0): csum failed root 5 ino 276 off 0
        // csum 0x498cf137 expected csum 0x69cebe50 mirror 1" (the kernel
        // prints the checksum's bytes in order).
        let sum = ChecksumType::Crc32.compute(&[0x5a; 4096]);
        assert_eq!(sum, [0x49, 0x8c, 0xf1, 0x37]);
    }
}
