//! Where a filesystem address lives: a data chunk's geometry and the one
//! mapping of its bytes to devices, as btrfs maps them (`btrfs_map_block`
//! in fs/btrfs/volumes.c): SINGLE and DUP on their one device, RAID1* a
//! whole copy on each device, RAID0 and RAID10 by stripe units (64 KiB) in
//! turn over the devices (RAID10: over the mirrored sets), RAID5/6 by data
//! stripe units with the stripe set rotated by one device per full stripe.
//!
//! Pure code, shared by `read-test --pid` (which members hold a file) and
//! `rescue` (which bytes of a file need a missing device).

use crate::model::profile::Profile;

/// One data chunk of the chunk tree, as far as the mapping needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chunk {
    /// Its profile.
    pub profile: Profile,
    /// Logical start (filesystem address).
    pub logical: u64,
    /// Logical length.
    pub length: u64,
    /// Bytes of one stripe unit (64 KiB).
    pub stripe_len: u64,
    /// RAID10's mirrors per stripe set.
    pub sub_stripes: u16,
    /// The device of each stripe, in order.
    pub devids: Vec<u64>,
}

/// A run of filesystem addresses that one set of devices holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Piece<'a> {
    /// First filesystem address.
    pub logical: u64,
    /// Bytes.
    pub len: u64,
    /// The devices holding a whole copy of these bytes: any one of them
    /// serves a read (one device for SINGLE, DUP, RAID0 and RAID5/6 data;
    /// each mirror for RAID1*; the mirrored set for RAID10).
    pub holders: &'a [u64],
    /// RAID5/6: every device of the stripe set (a data unit whose device is
    /// missing is rebuilt from the others while at most `parity` of them
    /// are missing); empty otherwise.
    pub stripe_set: &'a [u64],
    /// Parity units per full stripe: 1 for RAID5, 2 for RAID6, 0 otherwise.
    pub parity: u8,
}

impl Piece<'_> {
    /// Whether the bytes can be read when the devices `missing` says are
    /// gone: a holder is present, or (RAID5/6) few enough devices of the
    /// stripe set are missing to rebuild the unit.
    pub fn readable(&self, missing: impl Fn(u64) -> bool) -> bool {
        if self.holders.iter().any(|&d| !missing(d)) {
            return true;
        }
        self.parity > 0
            && self.stripe_set.iter().filter(|&&d| missing(d)).count() <= usize::from(self.parity)
    }
}

/// The data chunks of a filesystem, sorted by logical address.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ChunkMap {
    chunks: Vec<Chunk>,
}

impl ChunkMap {
    /// The map of `chunks` (data chunks only: the caller leaves the others out).
    pub fn new(mut chunks: Vec<Chunk>) -> Self {
        chunks.sort_by_key(|c| c.logical);
        Self { chunks }
    }

    /// The chunks, in logical order.
    pub fn chunks(&self) -> &[Chunk] {
        &self.chunks
    }

    /// Every device id that holds a stripe of some data chunk.
    pub fn devids(&self) -> std::collections::BTreeSet<u64> {
        self.chunks
            .iter()
            .flat_map(|c| c.devids.iter().copied())
            .collect()
    }

    /// Calls `each` for the pieces of `[addr, addr + len)` in address
    /// order: `Some(piece)` inside a chunk, `None` with the start and length
    /// of a run that no data chunk holds.
    pub fn pieces<'a>(&'a self, mut addr: u64, mut len: u64, mut each: impl FnMut(Mapped<'a>)) {
        while len > 0 {
            let i = self.chunks.partition_point(|c| c.logical <= addr);
            let chunk = i
                .checked_sub(1)
                .map(|i| &self.chunks[i])
                .filter(|c| addr < c.logical.saturating_add(c.length));
            let Some(c) = chunk else {
                // Up to the next chunk, or the whole rest.
                let next = self.chunks.get(i).map_or(u64::MAX, |c| c.logical);
                let take = len.min(next.saturating_sub(addr)).max(1).min(len);
                each(Mapped::Unmapped {
                    logical: addr,
                    len: take,
                });
                addr += take;
                len -= take;
                continue;
            };
            let take = len.min(c.logical + c.length - addr);
            place(c, addr, take, &mut each);
            addr += take;
            len -= take;
        }
    }
}

impl ChunkMap {
    /// The bytes of `extents` (filesystem address, length) by the profile
    /// and stripe count (`num_stripes`) of the data chunk holding them: how
    /// wide a file is striped. Addresses no data chunk holds are left out.
    pub fn bytes_by_width(
        &self,
        extents: &[(u64, u64)],
    ) -> std::collections::BTreeMap<(Profile, u32), u64> {
        let mut out = std::collections::BTreeMap::new();
        for &(mut addr, mut len) in extents {
            while len > 0 {
                let i = self.chunks.partition_point(|c| c.logical <= addr);
                match i
                    .checked_sub(1)
                    .map(|i| &self.chunks[i])
                    .filter(|c| addr < c.logical.saturating_add(c.length))
                {
                    Some(c) => {
                        let take = len.min(c.logical + c.length - addr);
                        let n = u32::try_from(c.devids.len()).unwrap_or(u32::MAX);
                        *out.entry((c.profile, n)).or_default() += take;
                        addr += take;
                        len -= take;
                    }
                    None => {
                        let next = self.chunks.get(i).map_or(u64::MAX, |c| c.logical);
                        let take = len.min(next.saturating_sub(addr)).max(1).min(len);
                        addr = addr.saturating_add(take);
                        len -= take;
                    }
                }
            }
        }
        out
    }
}

/// One piece of a mapped run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mapped<'a> {
    /// Inside a data chunk.
    Piece(Piece<'a>),
    /// Addresses no data chunk holds.
    Unmapped {
        /// First address.
        logical: u64,
        /// Bytes.
        len: u64,
    },
}

/// The pieces of `[addr, addr + len)`, all inside chunk `c`.
fn place<'a>(c: &'a Chunk, addr: u64, mut len: u64, each: &mut impl FnMut(Mapped<'a>)) {
    let n = c.devids.len();
    if n == 0 {
        each(Mapped::Unmapped { logical: addr, len });
        return;
    }
    let whole = |holders: &'a [u64]| {
        Mapped::Piece(Piece {
            logical: addr,
            len,
            holders,
            stripe_set: &[],
            parity: 0,
        })
    };
    let unit = c.stripe_len.max(4096);
    let mut offset = addr - c.logical;
    match c.profile {
        Profile::Single | Profile::Dup => each(whole(&c.devids[..1])),
        Profile::Raid1 | Profile::Raid1c3 | Profile::Raid1c4 => each(whole(&c.devids)),
        Profile::Raid0 | Profile::Raid10 | Profile::Raid5 | Profile::Raid6 => {
            let sub = if c.profile == Profile::Raid10 {
                usize::from(c.sub_stripes.max(1))
            } else {
                1
            };
            let parity: u8 = match c.profile {
                Profile::Raid5 => 1,
                Profile::Raid6 => 2,
                _ => 0,
            };
            let groups = (n / sub).max(1);
            let data_stripes = groups.saturating_sub(usize::from(parity)).max(1);
            while len > 0 {
                let nr = offset / unit;
                let take = len.min(unit - offset % unit);
                let (holders, stripe_set) = if parity == 0 {
                    let g = (nr % groups as u64) as usize;
                    (&c.devids[g * sub..(g * sub + sub).min(n)], &[][..])
                } else {
                    let full = nr / data_stripes as u64;
                    let index = ((nr % data_stripes as u64 + full) % n as u64) as usize;
                    (&c.devids[index..=index], &c.devids[..])
                };
                each(Mapped::Piece(Piece {
                    logical: c.logical + offset,
                    len: take,
                    holders,
                    stripe_set,
                    parity,
                }));
                offset += take;
                len -= take;
            }
        }
    }
}

/// The bytes a scrub reads on each device: for each chunk (any type) and
/// its used bytes, every stripe holds `used / data_stripes` of them (the
/// kernel scrubs only the extents in use, on each stripe: both copies of
/// DUP, each mirror of RAID1*, a share of RAID0/10, data and parity of
/// RAID5/6). Sorted by devid.
pub fn used_per_device<'a>(chunks: impl IntoIterator<Item = (&'a Chunk, u64)>) -> Vec<(u64, u64)> {
    let mut per: std::collections::BTreeMap<u64, u64> = std::collections::BTreeMap::new();
    for (c, used) in chunks {
        let n = u32::try_from(c.devids.len()).unwrap_or(u32::MAX);
        if n == 0 {
            continue;
        }
        let share = used / u64::from(c.profile.data_stripes(n));
        for d in &c.devids {
            *per.entry(*d).or_default() += share;
        }
    }
    per.into_iter().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const K64: u64 = 64 << 10;
    const MIB: u64 = 1 << 20;
    const G: u64 = 1 << 30;

    fn chunk(profile: Profile, logical: u64, length: u64, devids: &[u64], sub: u16) -> Chunk {
        Chunk {
            profile,
            logical,
            length,
            stripe_len: K64,
            sub_stripes: sub,
            devids: devids.to_vec(),
        }
    }

    fn all(map: &ChunkMap, addr: u64, len: u64) -> Vec<(u64, u64, Vec<u64>)> {
        let mut v = Vec::new();
        map.pieces(addr, len, |m| match m {
            Mapped::Piece(p) => v.push((p.logical, p.len, p.holders.to_vec())),
            Mapped::Unmapped { logical, len } => v.push((logical, len, vec![])),
        });
        v
    }

    #[test]
    fn raid0_turns_over_the_devices_by_stripe_unit() {
        let m = ChunkMap::new(vec![chunk(Profile::Raid0, G, 96 * MIB, &[1, 2, 3], 1)]);
        assert_eq!(
            all(&m, G + K64 / 2, 2 * K64),
            vec![
                (G + K64 / 2, K64 / 2, vec![1]),
                (G + K64, K64, vec![2]),
                (G + 2 * K64, K64 / 2, vec![3]),
            ]
        );
        // The fourth unit is back on the first device.
        assert_eq!(all(&m, G + 3 * K64, 10), vec![(G + 3 * K64, 10, vec![1])]);
    }

    #[test]
    fn bytes_by_width_counts_each_chunk_shape_once_across_chunks() {
        // A raid0 chunk of 3 stripes, then one of 4 after a device add.
        let m = ChunkMap::new(vec![
            chunk(Profile::Raid0, G + 96 * MIB, 128 * MIB, &[1, 2, 3, 4], 1),
            chunk(Profile::Raid0, G, 96 * MIB, &[1, 2, 3], 1),
        ]);
        let w = m.bytes_by_width(&[(G + 90 * MIB, 10 * MIB), (G, MIB), (G - MIB, 2 * MIB)]);
        assert_eq!(
            w.into_iter().collect::<Vec<_>>(),
            vec![
                ((Profile::Raid0, 3), 6 * MIB + MIB + MIB),
                ((Profile::Raid0, 4), 4 * MIB)
            ]
        );
    }

    #[test]
    fn runs_outside_chunks_and_across_chunks_are_split() {
        let m = ChunkMap::new(vec![
            chunk(Profile::Single, G + 8 * MIB, 8 * MIB, &[2], 1),
            chunk(Profile::Single, G, 8 * MIB, &[1], 1),
        ]);
        assert_eq!(
            all(&m, G - 10, 8 * MIB + 20),
            vec![
                (G - 10, 10, vec![]),
                (G, 8 * MIB, vec![1]),
                (G + 8 * MIB, 10, vec![2]),
            ]
        );
        assert_eq!(all(&m, G + 16 * MIB, 5), vec![(G + 16 * MIB, 5, vec![])]);
        assert!(all(&m, G, 0).is_empty());
    }

    #[test]
    fn readable_with_missing_devices_per_profile() {
        let gone = |d: u64| d == 2;
        let one = |profile, devids: &[u64], sub| {
            let m = ChunkMap::new(vec![chunk(profile, G, 8 * MIB, devids, sub)]);
            let mut r = Vec::new();
            m.pieces(G, 4 * K64, |x| {
                if let Mapped::Piece(p) = x {
                    r.push(p.readable(gone));
                }
            });
            r
        };
        assert_eq!(
            one(Profile::Raid0, &[1, 2, 3], 1),
            [true, false, true, true]
        );
        assert_eq!(one(Profile::Single, &[2], 1), [false]);
        assert_eq!(one(Profile::Dup, &[2, 2], 1), [false]);
        assert_eq!(one(Profile::Raid1, &[1, 2], 1), [true]);
        assert_eq!(one(Profile::Raid1, &[2, 3], 1), [true]);
        // RAID10 over 4: units alternate between the pairs (1,2) and (3,4).
        assert_eq!(
            one(Profile::Raid10, &[1, 2, 3, 4], 2),
            [true, true, true, true]
        );
        // RAID5: one device missing is rebuilt from parity.
        assert_eq!(one(Profile::Raid5, &[1, 2, 3], 1), [true; 4]);
        let two_gone = |d: u64| d == 2 || d == 3;
        let m = ChunkMap::new(vec![chunk(Profile::Raid5, G, 8 * MIB, &[1, 2, 3], 1)]);
        let mut r = Vec::new();
        m.pieces(G, 2 * K64, |x| {
            if let Mapped::Piece(p) = x {
                r.push(p.readable(two_gone));
            }
        });
        assert_eq!(r, [true, false]);
    }

    #[test]
    fn a_scrub_reads_each_copy_and_a_share_of_each_stripe() {
        let chunk = |profile, devids: &[u64]| Chunk {
            profile,
            logical: 0,
            length: 1 << 30,
            stripe_len: 64 << 10,
            sub_stripes: if profile == Profile::Raid10 { 2 } else { 1 },
            devids: devids.to_vec(),
        };
        let raid1 = chunk(Profile::Raid1, &[1, 2]);
        let dup = chunk(Profile::Dup, &[1, 1]);
        let raid0 = chunk(Profile::Raid0, &[1, 2, 3, 4]);
        let raid10 = chunk(Profile::Raid10, &[1, 2, 3, 4]);
        let raid5 = chunk(Profile::Raid5, &[1, 2, 3]);
        assert_eq!(used_per_device([(&raid1, 600)]), [(1, 600), (2, 600)]);
        assert_eq!(used_per_device([(&dup, 100)]), [(1, 200)]);
        assert_eq!(
            used_per_device([(&raid0, 400), (&raid10, 400)]),
            [(1, 300), (2, 300), (3, 300), (4, 300)]
        );
        assert_eq!(
            used_per_device([(&raid5, 200)]),
            [(1, 100), (2, 100), (3, 100)]
        );
        assert!(used_per_device([]).is_empty());
    }
}
