//! The pure classifier: a file's extents (FIEMAP, in file order) mapped
//! through the chunk map ([`crate::model::stripes`]) against the set of
//! missing devices give its state, the byte ranges that cannot be read and
//! how that was judged.
//!
//! - A plain extent: every piece of it (one stripe unit on RAID0) is
//!   readable if a device holding it is present (a mirror, a RAID5/6
//!   rebuild); the file ranges of the others are damaged.
//! - Holes, preallocated (unwritten) extents and inline data need no data
//!   device byte: intact (inline data is in metadata, which has copies).
//! - A compressed extent: FIEMAP gives where its disk extent begins, not how
//!   long it is; btrfs never stores more than 128 KiB for one
//!   (BTRFS_MAX_COMPRESSED, and a compressed extent is kept only when it is
//!   smaller than its data). Its first byte on a missing device: damaged
//!   (the whole range it decompresses to). The whole 128 KiB window on
//!   present devices: intact. Otherwise unknown: reading decides.
//! - Delalloc (cannot happen on a read-only mount) and addresses outside
//!   every data chunk: unknown.

use std::collections::{BTreeMap, BTreeSet};

use crate::model::stripes::{ChunkMap, Mapped};
use crate::rescue::report::{ByteRange, FileState};
use crate::sys::kernel::extents::Extent;

/// The most bytes a compressed extent occupies on disk.
pub const COMPRESSED_MAX: u64 = 128 << 10;

/// Byte ranges in file order, adjacent ones merged.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Ranges(pub Vec<ByteRange>);

impl Ranges {
    /// Adds `[offset, offset + length)`, merging with the last range when
    /// they touch or overlap (ranges are added in file order; an earlier
    /// one is inserted in order).
    pub fn add(&mut self, offset: u64, length: u64) {
        if length == 0 {
            return;
        }
        if let Some(last) = self.0.last_mut() {
            let end = last.offset + last.length;
            if offset >= last.offset && offset <= end {
                last.length = end.max(offset + length) - last.offset;
                return;
            }
            if offset < last.offset {
                // Out of order (a read error inside a range the map
                // listed): rebuild in order.
                let mut all = std::mem::take(&mut self.0);
                all.push(ByteRange { offset, length });
                all.sort_by_key(|r| r.offset);
                for r in all {
                    self.add_sorted(r);
                }
                return;
            }
        }
        self.0.push(ByteRange { offset, length });
    }

    fn add_sorted(&mut self, r: ByteRange) {
        if let Some(last) = self.0.last_mut() {
            let end = last.offset + last.length;
            if r.offset <= end {
                last.length = end.max(r.offset + r.length) - last.offset;
                return;
            }
        }
        self.0.push(r);
    }

    /// Bytes covered.
    pub fn bytes(&self) -> u64 {
        self.0.iter().map(|r| r.length).sum()
    }

    /// Whether `[offset, offset + length)` overlaps a range.
    pub fn overlaps(&self, offset: u64, length: u64) -> bool {
        let end = offset + length;
        let i = self.0.partition_point(|r| r.offset + r.length <= offset);
        self.0.get(i).is_some_and(|r| r.offset < end)
    }

    /// The first range that overlaps `[offset, offset + length)`.
    pub fn first_overlap(&self, offset: u64, length: u64) -> Option<ByteRange> {
        let end = offset + length;
        let i = self.0.partition_point(|r| r.offset + r.length <= offset);
        self.0.get(i).filter(|r| r.offset < end).copied()
    }

    /// Whether there is none.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// What the map says about one file.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Judgement {
    /// Ranges that need a missing device.
    pub damaged: Ranges,
    /// Ranges the map cannot judge.
    pub unknown: Ranges,
    /// How it was judged (distinct reasons, in the order met).
    pub judged: Vec<String>,
}

impl Judgement {
    /// Damaged when a range is, else unknown when one is, else intact.
    pub fn state(&self) -> FileState {
        if !self.damaged.is_empty() {
            FileState::Damaged
        } else if !self.unknown.is_empty() {
            FileState::Unknown
        } else {
            FileState::Intact
        }
    }

    /// Adds a reason once.
    pub fn because(&mut self, why: impl Into<String>) {
        let why = why.into();
        if !self.judged.contains(&why) {
            self.judged.push(why);
        }
    }
}

/// Judges the files of one filesystem against its missing devices.
#[derive(Debug, Clone)]
pub struct Classifier<'a> {
    map: &'a ChunkMap,
    missing: &'a BTreeSet<u64>,
}

impl<'a> Classifier<'a> {
    /// A classifier over `map` with the devices `missing` gone.
    pub fn new(map: &'a ChunkMap, missing: &'a BTreeSet<u64>) -> Self {
        Self { map, missing }
    }

    /// Starts judging a file of `size` bytes.
    pub fn file(&self, size: u64) -> FileJudge<'_, 'a> {
        FileJudge {
            c: self,
            size,
            mapped: 0,
            lost_on: BTreeMap::new(),
            j: Judgement::default(),
        }
    }
}

/// The judgement of one file in progress: feed it the extents in file order.
#[derive(Debug)]
pub struct FileJudge<'c, 'a> {
    c: &'c Classifier<'a>,
    size: u64,
    mapped: u64,
    lost_on: BTreeMap<u64, u64>,
    j: Judgement,
}

impl FileJudge<'_, '_> {
    /// One extent (FIEMAP, clipped to the file size).
    pub fn extent(&mut self, e: &Extent) {
        self.mapped += e.length;
        let missing = |d: u64| self.c.missing.contains(&d);
        if e.inline {
            self.j
                .because("inline in metadata (on every metadata copy)");
        } else if e.unwritten {
            self.j
                .because("preallocated extent (reads as zeros, no device byte)");
        } else if e.delalloc {
            self.j.unknown.add(e.file_offset, e.length);
            self.j
                .because("delalloc extent (not written back: no address to map)");
        } else if e.encoded {
            self.compressed(e);
        } else {
            self.j.because("extents mapped through the chunk tree");
            let mut lost: Vec<(u64, u64, u64)> = Vec::new();
            let mut unmapped: Vec<(u64, u64)> = Vec::new();
            self.c.map.pieces(e.address, e.length, |m| match m {
                Mapped::Piece(p) if !p.readable(missing) => {
                    lost.push((p.logical, p.len, p.holders[0]));
                }
                Mapped::Piece(_) => {}
                Mapped::Unmapped { logical, len } => unmapped.push((logical, len)),
            });
            for (addr, len, devid) in lost {
                self.j.damaged.add(e.file_offset + (addr - e.address), len);
                *self.lost_on.entry(devid).or_default() += len;
            }
            for (addr, len) in unmapped {
                self.j.unknown.add(e.file_offset + (addr - e.address), len);
                self.j.because("an address outside every data chunk");
            }
        }
    }

    /// A compressed extent: see the module documentation.
    fn compressed(&mut self, e: &Extent) {
        let missing = |d: u64| self.c.missing.contains(&d);
        let mut first: Option<(bool, u64)> = None;
        let mut rest_ok = true;
        let mut rest_devid = None;
        self.c.map.pieces(e.address, COMPRESSED_MAX, |m| match m {
            Mapped::Piece(p) => {
                let ok = p.readable(missing);
                if first.is_none() {
                    first = Some((ok, p.holders[0]));
                } else if !ok {
                    rest_ok = false;
                    rest_devid.get_or_insert(p.holders[0]);
                }
            }
            Mapped::Unmapped { .. } => {
                if first.is_none() {
                    first = Some((false, 0));
                } else {
                    rest_ok = false;
                }
            }
        });
        match first {
            Some((false, 0)) => {
                self.j.unknown.add(e.file_offset, e.length);
                self.j
                    .because("compressed extent: its disk extent is outside every data chunk");
            }
            Some((false, devid)) => {
                self.j.damaged.add(e.file_offset, e.length);
                *self.lost_on.entry(devid).or_default() += e.length;
                self.j.because(format!(
                    "compressed extent: its disk extent's first byte on missing devid {devid}"
                ));
            }
            Some((true, devid)) if rest_ok => self.j.because(format!(
                "compressed extent: its disk extent (at most 128 KiB from its first byte, on devid {devid}) on present devices"
            )),
            Some((true, devid)) => {
                self.j.unknown.add(e.file_offset, e.length);
                let other = rest_devid.map_or("an unmapped address".to_owned(), |d| {
                    format!("missing devid {d}")
                });
                self.j.because(format!(
                    "compressed extent: its disk extent begins on devid {devid} (present) and may reach {other} (FIEMAP gives no on-disk length)"
                ));
            }
            None => {}
        }
    }

    /// The judgement, with the reasons for holes and lost bytes per device.
    pub fn finish(mut self) -> Judgement {
        if self.size == 0 {
            self.j.because("empty file");
        } else if self.mapped < self.size {
            self.j.because("holes (read as zeros, no device byte)");
        }
        for (devid, bytes) in &self.lost_on {
            self.j
                .because(format!("{bytes} bytes on missing devid {devid}"));
        }
        self.j
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::profile::Profile;
    use crate::model::stripes::Chunk;

    const K64: u64 = 64 << 10;
    const MIB: u64 = 1 << 20;
    const G: u64 = 1 << 30;

    fn map(profile: Profile, devids: &[u64]) -> ChunkMap {
        ChunkMap::new(vec![Chunk {
            profile,
            logical: G,
            length: 64 * MIB,
            stripe_len: K64,
            sub_stripes: if profile == Profile::Raid10 { 2 } else { 1 },
            devids: devids.to_vec(),
        }])
    }

    fn plain(file_offset: u64, address: u64, length: u64) -> Extent {
        Extent {
            file_offset,
            length,
            address,
            encoded: false,
            inline: false,
            unwritten: false,
            delalloc: false,
            shared: false,
        }
    }

    fn judge(m: &ChunkMap, missing: &[u64], size: u64, extents: &[Extent]) -> Judgement {
        let missing: BTreeSet<u64> = missing.iter().copied().collect();
        let c = Classifier::new(m, &missing);
        let mut f = c.file(size);
        for e in extents {
            f.extent(e);
        }
        f.finish()
    }

    fn r(offset: u64, length: u64) -> ByteRange {
        ByteRange { offset, length }
    }

    #[test]
    fn raid0_loses_every_unit_on_the_missing_device() {
        let m = map(Profile::Raid0, &[1, 2, 3]);
        // 5 units from the chunk start: units 1 and 4 are on devid 2.
        let j = judge(&m, &[2], 5 * K64, &[plain(0, G, 5 * K64)]);
        assert_eq!(j.state(), FileState::Damaged);
        assert_eq!(j.damaged.0, vec![r(K64, K64), r(4 * K64, K64)]);
        assert_eq!(j.damaged.bytes(), 2 * K64);
        assert!(
            j.judged
                .contains(&format!("{} bytes on missing devid 2", 2 * K64))
        );
        // A file within one unit on a present device: intact.
        let j = judge(&m, &[2], 4096, &[plain(0, G + 2 * K64, 4096)]);
        assert_eq!(j.state(), FileState::Intact);
        // The same, nothing missing.
        let j = judge(&m, &[], 5 * K64, &[plain(0, G, 5 * K64)]);
        assert_eq!(j.state(), FileState::Intact);
    }

    #[test]
    fn single_loses_the_chunk_on_the_missing_device_only() {
        let m = ChunkMap::new(vec![
            Chunk {
                profile: Profile::Single,
                logical: G,
                length: 8 * MIB,
                stripe_len: K64,
                sub_stripes: 1,
                devids: vec![1],
            },
            Chunk {
                profile: Profile::Single,
                logical: G + 8 * MIB,
                length: 8 * MIB,
                stripe_len: K64,
                sub_stripes: 1,
                devids: vec![3],
            },
        ]);
        let j = judge(&m, &[3], 4 * MIB, &[plain(0, G + 6 * MIB, 4 * MIB)]);
        assert_eq!(j.damaged.0, vec![r(2 * MIB, 2 * MIB)]);
        let j = judge(&m, &[1], 4 * MIB, &[plain(0, G + 6 * MIB, 4 * MIB)]);
        assert_eq!(j.damaged.0, vec![r(0, 2 * MIB)]);
    }

    #[test]
    fn raid1_survives_one_missing_device_and_not_two() {
        let m = map(Profile::Raid1, &[1, 2]);
        let j = judge(&m, &[2], MIB, &[plain(0, G, MIB)]);
        assert_eq!(j.state(), FileState::Intact);
        let j = judge(&m, &[1, 2], MIB, &[plain(0, G, MIB)]);
        assert_eq!(j.state(), FileState::Damaged);
        assert_eq!(j.damaged.bytes(), MIB);
    }

    #[test]
    fn holes_inline_and_preallocated_need_no_device() {
        let m = map(Profile::Raid0, &[1, 2, 3]);
        let mut inline = plain(0, 0, 100);
        inline.inline = true;
        let j = judge(&m, &[1, 2, 3], 100, &[inline]);
        assert_eq!(j.state(), FileState::Intact);
        assert!(j.judged[0].contains("inline"));
        let mut pre = plain(0, G, MIB);
        pre.unwritten = true;
        let j = judge(&m, &[1, 2, 3], MIB, &[pre]);
        assert_eq!(j.state(), FileState::Intact);
        // A sparse file: a hole, then one unit on the missing device.
        let j = judge(&m, &[1], 10 * MIB, &[plain(8 * MIB, G, 4096)]);
        assert_eq!(j.damaged.0, vec![r(8 * MIB, 4096)]);
        assert!(j.judged.iter().any(|s| s.contains("holes")));
        let j = judge(&m, &[1], 0, &[]);
        assert_eq!(j.state(), FileState::Intact);
        assert_eq!(j.judged, vec!["empty file".to_owned()]);
    }

    #[test]
    fn compressed_extents_are_judged_by_their_first_byte_and_window() {
        let m = map(Profile::Raid0, &[1, 2, 3]);
        let comp = |address| {
            let mut e = plain(0, address, 128 << 10);
            e.encoded = true;
            e
        };
        // First byte on devid 1, missing: damaged, the whole range.
        let j = judge(&m, &[1], 128 << 10, &[comp(G + 4096)]);
        assert_eq!(j.state(), FileState::Damaged);
        assert_eq!(j.damaged.0, vec![r(0, 128 << 10)]);
        assert!(j.judged[0].contains("first byte on missing devid 1"));
        // First byte on devid 1 present, the window reaches devid 2 missing.
        let j = judge(&m, &[2], 128 << 10, &[comp(G + 4096)]);
        assert_eq!(j.state(), FileState::Unknown);
        assert!(j.judged[0].contains("may reach missing devid 2"), "{j:?}");
        // The window reaches devids 2 and 3 only... with 1 missing the first
        // byte decides; with nothing missing: intact.
        let j = judge(&m, &[], 128 << 10, &[comp(G + 4096)]);
        assert_eq!(j.state(), FileState::Intact);
    }

    #[test]
    fn addresses_outside_the_chunks_are_unknown() {
        let m = map(Profile::Raid0, &[1, 2, 3]);
        let j = judge(&m, &[2], 4096, &[plain(0, 4096, 4096)]);
        assert_eq!(j.state(), FileState::Unknown);
        assert_eq!(j.unknown.0, vec![r(0, 4096)]);
    }

    #[test]
    fn ranges_merge_and_stay_in_order() {
        let mut r0 = Ranges::default();
        r0.add(0, 10);
        r0.add(10, 5);
        r0.add(20, 5);
        r0.add(12, 10);
        assert_eq!(r0.0, vec![r(0, 25)]);
        let mut r1 = Ranges::default();
        r1.add(100, 10);
        r1.add(0, 10);
        r1.add(5, 10);
        assert_eq!(r1.0, vec![r(0, 15), r(100, 10)]);
        assert!(r1.overlaps(14, 1));
        assert!(!r1.overlaps(15, 85));
        assert!(r1.overlaps(15, 86));
    }
}
