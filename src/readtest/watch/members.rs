//! Which members hold a file: its extents' filesystem addresses (FIEMAP)
//! mapped through the chunk tree to devices by the one mapping,
//! [`crate::model::stripes`] (as btrfs' `btrfs_map_block` does). Pure code.

use std::collections::BTreeMap;

use crate::model::stripes::Mapped;
use crate::sys::kernel::btrfs::{ChunkRecord, data_chunk_map};

/// Bytes of the file each device holds (a copy on each mirror counts on
/// each), by devid. Addresses outside every data chunk are left out.
pub(crate) fn bytes_per_devid(
    extents: &[(u64, u64)],
    chunks: &[ChunkRecord],
) -> BTreeMap<u64, u64> {
    let map = data_chunk_map(chunks);
    let mut out = BTreeMap::new();
    for &(addr, len) in extents {
        map.pieces(addr, len, |m| {
            if let Mapped::Piece(p) = m {
                for &d in p.holders {
                    *out.entry(d).or_default() += p.len;
                }
            }
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use btrfs_uapi::space::BlockGroupFlags as F;

    const K64: u64 = 64 << 10;
    const MIB: u64 = 1 << 20;

    fn chunk(flags: F, logical: u64, length: u64, devids: &[u64], sub: u16) -> ChunkRecord {
        ChunkRecord {
            flags: F::DATA | flags,
            logical,
            length,
            stripe_len: K64,
            num_stripes: devids.len() as u16,
            sub_stripes: sub,
            devids: devids.to_vec(),
        }
    }

    #[test]
    fn each_profile_places_bytes_as_btrfs_maps_them() {
        let g = 1 << 30;
        // SINGLE: one device; an extent across two chunks lands on both.
        let chunks = [
            chunk(F::empty(), g, 8 * MIB, &[1], 1),
            chunk(F::empty(), g + 8 * MIB, 8 * MIB, &[2], 1),
        ];
        let m = bytes_per_devid(&[(g + 6 * MIB, 4 * MIB)], &chunks);
        assert_eq!(m, BTreeMap::from([(1, 2 * MIB), (2, 2 * MIB)]));
        // RAID0 over 3: 64 KiB units in turn.
        let c = [chunk(F::RAID0, g, 96 * MIB, &[1, 2, 3], 1)];
        let m = bytes_per_devid(&[(g, 3 * MIB)], &c);
        assert_eq!(m, BTreeMap::from([(1, MIB), (2, MIB), (3, MIB)]));
        let m = bytes_per_devid(&[(g + K64, K64)], &c);
        assert_eq!(m, BTreeMap::from([(2, K64)]));
        // RAID1: each copy.
        let c = [chunk(F::RAID1, g, 8 * MIB, &[2, 5], 1)];
        assert_eq!(
            bytes_per_devid(&[(g, MIB)], &c),
            BTreeMap::from([(2, MIB), (5, MIB)])
        );
        // RAID10 over 4 (2 mirrored pairs): unit 0 on 1+2, unit 1 on 3+4.
        let c = [chunk(F::RAID10, g, 8 * MIB, &[1, 2, 3, 4], 2)];
        assert_eq!(
            bytes_per_devid(&[(g, 2 * K64)], &c),
            BTreeMap::from([(1, K64), (2, K64), (3, K64), (4, K64)])
        );
        // RAID5 over 3: 2 data units per full stripe, rotated by one.
        let c = [chunk(F::RAID5, g, 8 * MIB, &[1, 2, 3], 1)];
        assert_eq!(
            bytes_per_devid(&[(g, 2 * K64)], &c),
            BTreeMap::from([(1, K64), (2, K64)])
        );
        assert_eq!(
            bytes_per_devid(&[(g + 2 * K64, 2 * K64)], &c),
            BTreeMap::from([(2, K64), (3, K64)])
        );
        // DUP: both copies on the one device, counted once.
        let c = [chunk(F::DUP, g, 8 * MIB, &[4, 4], 1)];
        assert_eq!(bytes_per_devid(&[(g, MIB)], &c), BTreeMap::from([(4, MIB)]));
        // Outside every data chunk: nothing.
        assert!(bytes_per_devid(&[(0, MIB)], &c).is_empty());
    }
}
