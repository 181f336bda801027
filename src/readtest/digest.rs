//! A checksum of what a method read, cheap enough to run inside a timed
//! read and independent of how the read was split up.
//!
//! The file is seen as 4 KiB blocks. `full` hashes every block; `sampled`
//! hashes the first and the last block and one block per MiB, at a position
//! that depends only on the MiB's index, so every method samples the same
//! places. Each block's hash is
//! keyed by its index and the hashes are added, so threads can fold their
//! blocks in any order and merge at the end. The count of blocks hashed
//! also proves the whole file was covered.

use serde::{Deserialize, Serialize};

/// Bytes per block.
pub(crate) const BLOCK: u64 = 4096;
/// Sampled mode: one block in every span of this many bytes.
pub(crate) const SAMPLE_SPAN: u64 = 1 << 20;
const BLOCKS_PER_SPAN: u64 = SAMPLE_SPAN / BLOCK;

/// How much of the file is checksummed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum VerifyMode {
    /// The first and last 4 KiB block and one per MiB (about 0.4 % of
    /// the bytes).
    Sampled,
    /// Every byte.
    Full,
}

impl VerifyMode {
    /// The name used on the command line and in JSON.
    pub fn name(self) -> &'static str {
        match self {
            VerifyMode::Sampled => "sampled",
            VerifyMode::Full => "full",
        }
    }
}

/// The running checksum of one read of a file of `size` bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Digest {
    mode: VerifyMode,
    size: u64,
    sum: u64,
    blocks: u64,
}

/// murmur3's 64-bit finaliser: every input bit affects every output bit.
fn fmix64(mut k: u64) -> u64 {
    k ^= k >> 33;
    k = k.wrapping_mul(0xff51_afd7_ed55_8ccd);
    k ^= k >> 33;
    k = k.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    k ^ (k >> 33)
}

/// Hash of one block, keyed by its index. Four independent lanes keep the
/// multiplier busy, so `full` mode costs little CPU per GiB.
fn hash_block(index: u64, bytes: &[u8]) -> u64 {
    const K: [u64; 4] = [
        0x9e37_79b9_7f4a_7c15,
        0xc2b2_ae3d_27d4_eb4f,
        0x1656_67b1_9e37_79f9,
        0x85eb_ca77_c2b2_ae63,
    ];
    let mut lanes = [
        index ^ K[0],
        index.rotate_left(17) ^ K[1],
        index.rotate_left(31) ^ K[2],
        (bytes.len() as u64) ^ K[3],
    ];
    let mut chunks = bytes.chunks_exact(32);
    for c in &mut chunks {
        for (i, lane) in lanes.iter_mut().enumerate() {
            let w = u64::from_le_bytes(c[i * 8..i * 8 + 8].try_into().unwrap_or([0; 8]));
            *lane = (*lane ^ w).wrapping_mul(K[i]).rotate_left(29);
        }
    }
    let rest = chunks.remainder();
    let mut tail = [0u8; 32];
    tail[..rest.len()].copy_from_slice(rest);
    for (i, lane) in lanes.iter_mut().enumerate() {
        let w = u64::from_le_bytes(tail[i * 8..i * 8 + 8].try_into().unwrap_or([0; 8]));
        *lane = (*lane ^ w ^ rest.len() as u64).wrapping_mul(K[i]);
    }
    fmix64(
        lanes[0] ^ lanes[1].rotate_left(13) ^ lanes[2].rotate_left(27) ^ lanes[3].rotate_left(41),
    )
}

impl Digest {
    /// An empty digest for a read of a `size`-byte file.
    pub fn new(mode: VerifyMode, size: u64) -> Self {
        Self {
            mode,
            size,
            sum: 0,
            blocks: 0,
        }
    }

    /// The block sampled in span `span`.
    fn sampled_block(span: u64) -> u64 {
        span * BLOCKS_PER_SPAN + fmix64(span ^ 0x5eed_b10c_u64) % BLOCKS_PER_SPAN
    }

    /// The blocks that start in `[start, end)`, in order. With `sampled`,
    /// the file's first and last block and one per span.
    pub(crate) fn blocks_in(&self, start: u64, end: u64) -> Vec<u64> {
        let end = end.min(self.size);
        if start >= end {
            return Vec::new();
        }
        let first = start.div_ceil(BLOCK);
        let last = end.div_ceil(BLOCK); // exclusive
        match self.mode {
            VerifyMode::Full => (first..last).collect(),
            VerifyMode::Sampled => {
                // The first and the last block (the unaligned tail) always,
                // one block per span between.
                let final_block = (self.size - 1) / BLOCK;
                let mut v: Vec<u64> = std::iter::once(0)
                    .chain(
                        (first / BLOCKS_PER_SPAN..=(last - 1) / BLOCKS_PER_SPAN)
                            .map(Self::sampled_block),
                    )
                    .chain(std::iter::once(final_block))
                    .filter(|b| (first..last).contains(b))
                    .collect();
                v.sort_unstable();
                v.dedup();
                v
            }
        }
    }

    /// The file range of block `index` (shorter at the end of the file).
    pub(crate) fn block_range(&self, index: u64) -> (u64, u64) {
        let start = index * BLOCK;
        (start, (start + BLOCK).min(self.size))
    }

    /// Folds in block `index` whose bytes are `bytes`.
    pub(crate) fn add_block(&mut self, index: u64, bytes: &[u8]) {
        self.sum = self.sum.wrapping_add(hash_block(index, bytes));
        self.blocks += 1;
    }

    /// Folds in the bytes read at file offset `offset` (a multiple of 4
    /// KiB): every chosen block that lies wholly inside them.
    pub(crate) fn feed(&mut self, offset: u64, bytes: &[u8]) {
        let end = offset + bytes.len() as u64;
        for b in self.blocks_in(offset, end) {
            let (s, e) = self.block_range(b);
            if s >= offset && e <= end {
                let from = (s - offset) as usize;
                self.add_block(b, &bytes[from..from + (e - s) as usize]);
            }
        }
    }

    /// Adds another part of the same read (another thread's blocks).
    pub(crate) fn merge(&mut self, other: &Digest) {
        self.sum = self.sum.wrapping_add(other.sum);
        self.blocks += other.blocks;
    }

    /// The checksum, as 16 hex digits.
    pub fn hex(&self) -> String {
        format!("{:016x}", self.sum)
    }

    /// Blocks folded in.
    pub fn blocks(&self) -> u64 {
        self.blocks
    }

    /// The blocks a complete read folds in.
    pub(crate) fn expected_blocks(&self) -> u64 {
        self.blocks_in(0, self.size).len() as u64
    }

    /// True when every chosen block was folded in exactly once.
    pub(crate) fn is_complete(&self) -> bool {
        self.blocks == self.expected_blocks()
    }
}

/// The digest of a file's whole content held in memory (for tests and for
/// checking a reader against a plain read).
pub fn digest_of(mode: VerifyMode, bytes: &[u8]) -> Digest {
    let mut d = Digest::new(mode, bytes.len() as u64);
    d.feed(0, bytes);
    d
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn data(n: usize) -> Vec<u8> {
        (0..n)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 7) as u8)
            .collect()
    }

    #[test]
    fn split_reads_give_the_same_digest() {
        let bytes = data(5 * (1 << 20) + 1234);
        for mode in [VerifyMode::Full, VerifyMode::Sampled] {
            let whole = digest_of(mode, &bytes);
            assert!(whole.is_complete());
            // Threads: 1 MiB pieces folded in a scrambled order, merged.
            let mut a = Digest::new(mode, bytes.len() as u64);
            let mut b = Digest::new(mode, bytes.len() as u64);
            let pieces: Vec<usize> = (0..bytes.len().div_ceil(1 << 20)).rev().collect();
            for (n, p) in pieces.iter().enumerate() {
                let s = p << 20;
                let e = (s + (1 << 20)).min(bytes.len());
                let d = if n % 2 == 0 { &mut a } else { &mut b };
                d.feed(s as u64, &bytes[s..e]);
            }
            a.merge(&b);
            assert_eq!(a, whole, "{mode:?}");
        }
    }

    #[test]
    fn sampled_covers_one_block_per_mib_and_detects_changes() {
        let mut bytes = data(8 << 20);
        let d = digest_of(VerifyMode::Sampled, &bytes);
        // One per MiB, plus the first and the last block of the file.
        assert!((9..=10).contains(&d.blocks()), "{}", d.blocks());
        let full = digest_of(VerifyMode::Full, &bytes);
        assert_eq!(full.blocks(), 2048);
        // Changing a sampled block changes the sampled digest.
        let b = Digest::sampled_block(3) as usize * BLOCK as usize;
        bytes[b + 100] ^= 1;
        assert_ne!(digest_of(VerifyMode::Sampled, &bytes), d);
        assert_ne!(digest_of(VerifyMode::Full, &bytes), full);
    }

    #[test]
    fn missing_or_doubled_blocks_are_incomplete() {
        let bytes = data(3 << 20);
        let mut d = Digest::new(VerifyMode::Full, bytes.len() as u64);
        d.feed(0, &bytes[..1 << 20]);
        assert!(!d.is_complete());
        d.feed(1 << 20, &bytes[1 << 20..]);
        assert!(d.is_complete());
        d.feed(0, &bytes[..4096]);
        assert!(!d.is_complete());
        // Moved bytes (same content, wrong place) do not match.
        let mut swapped = bytes.clone();
        swapped.copy_within(0..4096, 8192);
        assert_ne!(
            digest_of(VerifyMode::Full, &swapped),
            digest_of(VerifyMode::Full, &bytes)
        );
    }

    #[test]
    fn tiny_and_empty_files() {
        let e = digest_of(VerifyMode::Sampled, &[]);
        assert_eq!((e.blocks(), e.expected_blocks()), (0, 0));
        assert!(e.is_complete());
        let t = digest_of(VerifyMode::Full, &[1, 2, 3]);
        assert_eq!(t.blocks(), 1);
        assert_ne!(t, digest_of(VerifyMode::Full, &[1, 2, 4]));
        // A short file: the span's block falls past its end, but the first
        // and the last block are always sampled.
        let s = digest_of(VerifyMode::Sampled, &data(5000));
        assert!(s.is_complete());
        assert_eq!(s.blocks(), 2);
    }

    proptest! {
        #[test]
        fn any_block_aligned_split_matches(len in 0usize..40_000, cut in 0usize..10) {
            let bytes = data(len);
            let at = (cut * 4096).min(len);
            let mut d = Digest::new(VerifyMode::Full, len as u64);
            d.feed(at as u64, &bytes[at..]);
            d.feed(0, &bytes[..at]);
            prop_assert_eq!(d, digest_of(VerifyMode::Full, &bytes));
        }
    }
}
