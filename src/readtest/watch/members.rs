//! Which members hold a file: its extents' filesystem addresses (FIEMAP)
//! mapped through the chunk tree to devices, as btrfs maps them
//! (`btrfs_map_block`): SINGLE and DUP on their one device, RAID1* on every
//! copy's, RAID0 and RAID10 by 64 KiB stripe units in turn, RAID5/6 by data
//! stripe units with the stripe set rotated by one device per full stripe.
//! Pure code.

use std::collections::BTreeMap;

use crate::model::profile::Profile;
use crate::sys::kernel::btrfs::ChunkRecord;
use crate::sys::kernel::btrfs::profile_of;

/// Bytes of the file each device holds (a copy on each mirror counts on
/// each), by devid. Addresses outside every data chunk are left out.
pub(crate) fn bytes_per_devid(
    extents: &[(u64, u64)],
    chunks: &[ChunkRecord],
) -> BTreeMap<u64, u64> {
    let mut data: Vec<&ChunkRecord> = chunks
        .iter()
        .filter(|c| c.flags.contains(btrfs_uapi::space::BlockGroupFlags::DATA))
        .collect();
    data.sort_by_key(|c| c.logical);
    let mut out = BTreeMap::new();
    for &(mut addr, mut len) in extents {
        while len > 0 {
            let i = data.partition_point(|c| c.logical <= addr);
            let Some(c) = i.checked_sub(1).map(|i| data[i]) else {
                break;
            };
            if addr >= c.logical + c.length {
                break;
            }
            let take = len.min(c.logical + c.length - addr);
            place(c, addr - c.logical, take, &mut out);
            addr += take;
            len -= take;
        }
    }
    out
}

/// Adds `len` bytes at `offset` into chunk `c` to the devices holding them.
fn place(c: &ChunkRecord, mut offset: u64, mut len: u64, out: &mut BTreeMap<u64, u64>) {
    let n = c.devids.len();
    if n == 0 {
        return;
    }
    let mut add = |devid: u64, b: u64| *out.entry(devid).or_default() += b;
    let profile = profile_of(c.flags);
    let unit = c.stripe_len.max(4096);
    match profile {
        Profile::Single | Profile::Dup => add(c.devids[0], len),
        Profile::Raid1 | Profile::Raid1c3 | Profile::Raid1c4 => {
            for &d in &c.devids {
                add(d, len);
            }
        }
        Profile::Raid0 | Profile::Raid10 | Profile::Raid5 | Profile::Raid6 => {
            let sub = if profile == Profile::Raid10 {
                usize::from(c.sub_stripes.max(1))
            } else {
                1
            };
            let parity = match profile {
                Profile::Raid5 => 1,
                Profile::Raid6 => 2,
                _ => 0,
            };
            let groups = (n / sub).max(1);
            let data_stripes = groups.saturating_sub(parity).max(1);
            while len > 0 {
                let nr = offset / unit;
                let take = len.min(unit - offset % unit);
                if parity == 0 {
                    let g = (nr % groups as u64) as usize;
                    for &d in &c.devids[g * sub..(g * sub + sub).min(n)] {
                        add(d, take);
                    }
                } else {
                    let full = nr / data_stripes as u64;
                    let index = (nr % data_stripes as u64 + full) % n as u64;
                    add(c.devids[index as usize], take);
                }
                offset += take;
                len -= take;
            }
        }
    }
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
