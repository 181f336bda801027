//! What a filtered data balance (`btrfs balance start -dusage=N`) returns
//! to the unallocated pool, estimated from the usage of each data chunk
//! (the block group items): the pure planner behind every "run:" that
//! suggests one, and behind `reclaim`'s steps. The kernel's filter
//! (`chunk_usage_filter` in fs/btrfs/volumes.c) relocates a chunk whose
//! used bytes are below N% of its length (`-dusage=0`: the empty ones
//! only), judging each chunk when the balance reaches it, from the highest
//! logical address down. Where the moved data goes is the kernel's
//! allocator's choice, and both ways were measured on 2 × 1 GiB RAID1s:
//! - into a new chunk (chunks with 268 MiB free among them: `-dusage=40`
//!   moved 124 MiB out of two chunks of 325 MiB and freed one of them,
//!   208 MiB);
//! - into the free space of chunks not reached yet, which then are no
//!   longer below the value (16 MiB files, three of four deleted:
//!   `-dusage=30` found four chunks about a quarter used and relocated
//!   two).
//!
//! The estimate is the smaller of the two: moved data counted in new
//! chunks of the relocated chunks' size, and moved data filling the next
//! chunks' holes first. It is an estimate, not a bound (the runs above
//! freed 0.95× and 1.15× of it); `reclaim` plans each step again from the chunks
//! as they are when it starts and stops on what the kernel reports.

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

/// The estimate for one `-dusage` value (see the module).
/// `chunks` in logical order, as the chunk tree lists them.
pub fn step(chunks: &[ChunkUse], usage: u8) -> Step {
    let (mut len, mut moves, mut n) = (0u64, 0u64, 0usize);
    for c in chunks.iter().filter(|c| relocated(c, usage)) {
        len += c.length;
        moves += c.used;
        n += 1;
    }
    // The moved data in new chunks of the size of those relocated (their
    // tails are not free).
    let typical = if n > 0 { len / n as u64 } else { 0 };
    let taken = if moves == 0 || typical == 0 {
        0
    } else {
        moves.div_ceil(typical) * typical
    };
    // Relocating every data chunk leaves the kernel one to allocate first
    // (btrfs_may_alloc_data_chunk: measured, -dusage=0 on a fresh
    // filesystem's only, empty chunk took 104 MiB more).
    let largest = chunks.iter().map(|c| c.length).max().unwrap_or(0);
    let taken = if n > 0 && n == chunks.len() {
        taken.max(largest)
    } else {
        taken
    };
    let in_new_chunks = len.saturating_sub(taken);
    Step {
        usage,
        chunks: n,
        moves_bytes: moves,
        frees_bytes: in_new_chunks.min(filling_holes(chunks, usage)),
    }
}

/// What the step frees when the moved data fills the free space of the
/// chunks the balance has not reached yet: the kernel goes from the highest
/// logical address down and judges each chunk by its usage when it gets
/// there, so a chunk that received moved data may no longer be below the
/// value (measured: `-dusage=30` on four chunks about a quarter used
/// relocated two of them).
fn filling_holes(chunks: &[ChunkUse], usage: u8) -> u64 {
    let mut used: Vec<u64> = chunks.iter().map(|c| c.used).collect();
    let mut gone = vec![false; chunks.len()];
    let typical = chunks.iter().map(|c| c.length).max().unwrap_or(0);
    let (mut freed, mut taken) = (0u64, 0u64);
    for i in (0..chunks.len()).rev() {
        let c = ChunkUse {
            length: chunks[i].length,
            used: used[i],
        };
        if !relocated(&c, usage) {
            continue;
        }
        gone[i] = true;
        freed += c.length;
        let mut left = c.used;
        // The next chunks to be judged first, then the ones passed.
        for j in (0..i).rev().chain((i + 1..chunks.len()).rev()) {
            if left == 0 {
                break;
            }
            if gone[j] {
                continue;
            }
            let take = chunks[j].length.saturating_sub(used[j]).min(left);
            used[j] += take;
            left -= take;
        }
        if left > 0 && typical > 0 {
            taken += left.div_ceil(typical) * typical;
        }
    }
    freed.saturating_sub(taken)
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

/// The `-dusage` (or `-musage`) values a reclaim tries up to `max`, in
/// order: [`USAGE_STEPS`] below it, then `max` itself.
pub fn usage_steps_to(max: u8) -> Vec<u8> {
    let max = max.min(100);
    let mut v: Vec<u8> = USAGE_STEPS.iter().copied().filter(|&u| u < max).collect();
    v.push(max);
    v
}

/// A reclaim's plan for one chunk type: the steps to run in order, each
/// with the cumulative prediction from the chunks as they are now (a step
/// relocates what the ones before left below its value), up to the first
/// whose prediction frees `goal_raw` raw bytes (`raw_per_logical` raw
/// bytes per logical byte of the type's profile), else every step up to
/// `max`. Steps estimated to free no more than the one before are left
/// out (they would move data for nothing: relocating a chunk that is
/// mostly full only takes a new one).
pub fn plan_steps(chunks: &[ChunkUse], max: u8, raw_per_logical: f64, goal_raw: u64) -> Vec<Step> {
    let mut out: Vec<Step> = Vec::new();
    for u in usage_steps_to(max) {
        let s = step(chunks, u);
        let before = out.last().map_or(0, |p| p.frees_bytes);
        if s.chunks == 0 || s.frees_bytes <= before {
            continue;
        }
        out.push(s);
        if raw_of(s.frees_bytes, raw_per_logical) >= goal_raw {
            break;
        }
    }
    out
}

/// Raw bytes of `logical` bytes at `raw_per_logical`.
pub fn raw_of(logical: u64, raw_per_logical: f64) -> u64 {
    (logical as f64 * raw_per_logical.max(1.0)) as u64
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
    fn moved_data_that_fills_the_next_chunks_keeps_them() {
        // Measured (2 × 1 GiB RAID1, 16 MiB files, three of four deleted):
        // -dusage=30 on four chunks about a quarter used relocated two; the
        // data of the first went into the holes of the next ones.
        let l = 214_695_936;
        let chunks = [c(l, l / 4 + l / 40), c(l, l / 4), c(l, l / 4), c(l, l / 4)];
        let s = step(&chunks, 30);
        assert_eq!(s.chunks, 4);
        assert!(s.frees_bytes <= 3 * l, "{s:?}");
        assert!(s.frees_bytes >= l, "{s:?}");
    }

    #[test]
    fn the_last_data_chunk_is_never_freed() {
        let s = step(&[c(8 * M, 0)], 0);
        assert_eq!((s.chunks, s.frees_bytes), (1, 0));
        assert!(plan_steps(&[c(8 * M, 0)], 90, 1.0, 100 * M).is_empty());
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

    #[test]
    fn a_plan_stops_at_the_first_step_predicted_to_reach_the_goal() {
        let g = 1024 * M;
        let chunks = [c(g, 0), c(g, g / 20), c(g, g / 4), c(g, g / 2), c(g, g)];
        assert_eq!(usage_steps_to(90).len(), USAGE_STEPS.len());
        assert_eq!(usage_steps_to(95).last(), Some(&95));
        assert_eq!(usage_steps_to(7), vec![0, 5, 7]);
        // One chunk: the empty one (RAID1: 2 GiB raw).
        let p = plan_steps(&chunks, 90, 2.0, 2 * g);
        assert_eq!(p.iter().map(|s| s.usage).collect::<Vec<_>>(), vec![0]);
        // More: 0, then not 10 (its 5% chunk's data would take a new
        // chunk: no more freed), 30 (the quarter-full one), 60 (the
        // half-full one).
        let p = plan_steps(&chunks, 90, 1.0, 3 * g);
        assert_eq!(
            p.iter().map(|s| s.usage).collect::<Vec<_>>(),
            vec![0, 30, 60]
        );
        assert!(p.last().unwrap().frees_bytes >= 2 * g);
        // Unreachable: every step up to the limit that adds a chunk.
        let p = plan_steps(&chunks, 20, 1.0, 100 * g);
        assert_eq!(p.iter().map(|s| s.usage).collect::<Vec<_>>(), vec![0]);
        // Nothing below the limit: no step.
        assert!(plan_steps(&[c(g, g)], 90, 1.0, g).is_empty());
    }
}
