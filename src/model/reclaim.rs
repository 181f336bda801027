//! What a filtered data balance (`btrfs balance start -dusage=N`) returns
//! to the unallocated pool, predicted from the usage of each data chunk
//! (the block group items): the pure planner behind every "run:" that
//! suggests one. The kernel's filter (`chunk_usage_filter` in
//! fs/btrfs/volumes.c) relocates a chunk whose used bytes are below N% of
//! its length (`-dusage=0`: the empty ones only). The moved data needs
//! contiguous room: the holes other chunks have are known only as a sum
//! (measured on a 2 × 1 GiB RAID1 whose chunks had 268 MiB free among them:
//! `-dusage=40` moved 124 MiB out of two chunks of 325 MiB and freed one of
//! them, 208 MiB; the data went to a new chunk), so the prediction is a
//! lower bound: moved data is counted in new chunks of the relocated
//! chunks' size, and what a step frees is what it relocates less those.

use serde::{Deserialize, Serialize};

/// One data chunk: its logical length and the bytes used in it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ChunkUse {
    /// Logical length.
    pub length: u64,
    /// Bytes used.
    pub used: u64,
}

/// The `-dusage` values tried, in order (`btrfs-balance-least-used` and
/// btrfsmaintenance step the same way).
pub const USAGE_STEPS: [u8; 12] = [0, 5, 10, 15, 20, 30, 40, 50, 60, 70, 80, 90];

/// What one `-dusage=N` would do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Step {
    /// The filter's value (percent).
    pub usage: u8,
    /// Chunks it relocates.
    pub chunks: usize,
    /// Used bytes it moves (logical).
    pub moves_bytes: u64,
    /// Logical bytes it returns to unallocated, net of the new chunks the
    /// moved data takes.
    pub frees_bytes: u64,
}

/// Whether the kernel's filter relocates `c` at `-dusage=usage`.
fn relocated(c: &ChunkUse, usage: u8) -> bool {
    let thresh = if usage == 0 {
        1
    } else {
        (u128::from(c.length) * u128::from(usage.min(100)) / 100) as u64
    };
    c.used < thresh
}

/// The prediction for one `-dusage` value (a lower bound: see the module).
pub fn step(chunks: &[ChunkUse], usage: u8) -> Step {
    let (mut len, mut moves, mut n) = (0u64, 0u64, 0usize);
    for c in chunks.iter().filter(|c| relocated(c, usage)) {
        len += c.length;
        moves += c.used;
        n += 1;
    }
    // Whole new chunks of the size of those relocated (their tails are
    // not free).
    let typical = if n > 0 { len / n as u64 } else { 0 };
    let taken = if moves == 0 || typical == 0 {
        0
    } else {
        moves.div_ceil(typical) * typical
    };
    Step {
        usage,
        chunks: n,
        moves_bytes: moves,
        frees_bytes: len.saturating_sub(taken),
    }
}

/// Every step of [`USAGE_STEPS`].
pub fn steps(chunks: &[ChunkUse]) -> Vec<Step> {
    USAGE_STEPS.iter().map(|&u| step(chunks, u)).collect()
}

/// The smallest step that frees at least `goal` logical bytes (the least
/// data moved for the room wanted); `None` when no step does.
pub fn first_reaching(chunks: &[ChunkUse], goal: u64) -> Option<Step> {
    steps(chunks)
        .into_iter()
        .find(|s| s.chunks > 0 && s.frees_bytes >= goal.max(1))
}

#[cfg(test)]
mod tests {
    use super::*;

    const M: u64 = 1 << 20;

    fn c(length: u64, used: u64) -> ChunkUse {
        ChunkUse { length, used }
    }

    #[test]
    fn the_kernel_filter_relocates_below_the_percentage() {
        let chunks = [c(100 * M, 0), c(100 * M, 4 * M), c(100 * M, 5 * M)];
        assert_eq!(step(&chunks, 0).chunks, 1, "usage=0: the empty chunk only");
        assert_eq!(step(&chunks, 5).chunks, 2, "5 MiB of 100 is not below 5%");
        assert_eq!(step(&chunks, 10).chunks, 3);
    }

    #[test]
    fn moved_data_is_counted_in_new_chunks() {
        // Three chunks of 1 GiB: two 10% used, one 50%. usage=20 moves
        // 200 MiB out of two chunks: one new chunk takes it, one is freed.
        let g = 1024 * M;
        let chunks = [c(g, g / 10), c(g, g / 10), c(g, g / 2)];
        let s = step(&chunks, 20);
        assert_eq!((s.chunks, s.moves_bytes, s.frees_bytes), (2, g / 5, g));
        // The measured case of the module's text: at least one chunk.
        let chunks = [
            c(107_347_968, 40_239_104),
            c(218_103_808, 83_886_080),
            c(218_103_808, 150_994_944),
            c(218_103_808, 83_886_080),
            c(174_325_760, 107_216_896),
        ];
        let s = step(&chunks, 40);
        assert_eq!(s.chunks, 3);
        assert!(s.frees_bytes <= 218_103_808, "{s:?}");
    }

    #[test]
    fn full_chunks_free_nothing() {
        // Every chunk 99% used: moving them needs as much room as they free.
        let g = 1024 * M;
        let chunks = [c(g, g - 10 * M); 4];
        for s in steps(&chunks) {
            assert!(s.frees_bytes < g, "{s:?}");
        }
        assert_eq!(first_reaching(&chunks, 256 * M), None);
    }

    #[test]
    fn first_reaching_takes_the_least_movement() {
        let g = 1024 * M;
        let chunks = [c(g, 0), c(g, g / 4), c(g, g / 2), c(g, g)];
        assert_eq!(first_reaching(&chunks, 256 * M).map(|s| s.usage), Some(0));
        // Two chunks' worth: the empty one and the quarter-full one free
        // one new chunk's worth only; the half-full one as well (60%:
        // three relocated, 768 MiB moved into one new chunk) frees two.
        let s = first_reaching(&chunks, 2 * g).unwrap();
        assert_eq!(s.usage, 60, "{s:?}");
        assert_eq!(s.frees_bytes, 2 * g);
    }
}
