//! The plan of a read-test, pure: from the arguments and what was read
//! about the file (its size, whether dontcache works on it, the cache mode
//! chosen), which methods run at which thread counts, in which order, over
//! which buffers. [`super::run`] reads the world, plans, then executes.

use super::analysis::Situation;
use super::method::{self, Method};
use super::{CacheMode, ReadTestOptions, ring_bytes};

/// What a read-test will do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Plan {
    /// The methods asked for, in the report's order.
    pub methods: Vec<Method>,
    /// Those that can run here (dontcache only where the kernel has it).
    pub(crate) runnable: Vec<Method>,
    /// The thread counts of the threaded methods (one, or the sweep).
    pub counts: Vec<u32>,
    /// One unit per method and thread count; rounds rotate over them.
    pub units: Vec<(Method, u32)>,
    /// Rounds per situation.
    pub rounds: u32,
    /// Bytes per read of one thread.
    pub chunk: u64,
    /// The destination ring.
    pub(crate) ring_len: u64,
    /// direct-copy's bounce buffers, all of them (0 without direct-copy).
    pub(crate) bounce_len: u64,
    /// How many bounce buffers (one per thread of the largest count).
    pub(crate) bounce_buffers: usize,
    /// What direct keeps in flight (threads × chunk).
    pub(crate) in_flight: u64,
    /// Cold, warm or both; [`Plan::with_cache`] sets it.
    pub cache: CacheMode,
}

/// One run of the plan.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Step {
    pub situation: Situation,
    /// From 0.
    pub round: u32,
    pub method: Method,
    pub threads: u32,
}

/// The plan for a file of `size` bytes; `dontcache_works`: the kernel
/// reads this file with RWF_DONTCACHE. Cold until [`Plan::with_cache`].
pub(crate) fn plan(opts: &ReadTestOptions, size: u64, dontcache_works: bool) -> Plan {
    let methods = opts.method_list();
    let chunk = opts.chunk_bytes();
    let counts = opts.thread_counts();
    let runnable: Vec<Method> = methods
        .iter()
        .copied()
        .filter(|m| dontcache_works || *m != Method::Dontcache)
        .collect();
    let units: Vec<(Method, u32)> = runnable
        .iter()
        .flat_map(|&m| {
            if m.is_threaded() {
                counts.iter().map(|&c| (m, c)).collect::<Vec<_>>()
            } else {
                vec![(m, 1)]
            }
        })
        .collect();
    let direct_copy = methods.contains(&Method::DirectCopy);
    let max_threads = opts.max_threads();
    Plan {
        ring_len: ring_bytes(opts.buffer_bytes(), size, chunk),
        bounce_len: if direct_copy {
            chunk * u64::from(max_threads)
        } else {
            0
        },
        bounce_buffers: if direct_copy { max_threads as usize } else { 0 },
        in_flight: chunk * u64::from(max_threads),
        methods,
        runnable,
        counts,
        units,
        rounds: opts.rounds,
        chunk,
        cache: CacheMode::Cold,
    }
}

impl Plan {
    /// The same plan measuring `cache`.
    pub(crate) fn with_cache(self, cache: CacheMode) -> Plan {
        Plan { cache, ..self }
    }

    /// The situations measured, in order.
    pub fn situations(&self) -> Vec<Situation> {
        self.cache.situations()
    }

    /// Every run in order: per situation, per round, the units in the
    /// round's rotation.
    pub fn steps(&self) -> Vec<Step> {
        let mut out = Vec::new();
        for situation in self.situations() {
            for round in 0..self.rounds {
                for (method, threads) in method::round_order(&self.units, round as usize) {
                    out.push(Step {
                        situation,
                        round,
                        method,
                        threads,
                    });
                }
            }
        }
        out
    }

    /// True when a threaded method runs.
    pub(crate) fn any_threaded(&self) -> bool {
        self.runnable.iter().any(|m| m.is_threaded())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts(methods: &[Method], threads: &[u32]) -> ReadTestOptions {
        let mut o = ReadTestOptions::new("/x");
        o.methods = methods.to_vec();
        o.threads = threads.to_vec();
        o
    }

    #[test]
    fn units_rotate_over_rounds_and_situations() {
        let mut o = opts(&[Method::Direct, Method::Buffered], &[1, 4]);
        o.rounds = 2;
        let p = plan(&o, 1 << 30, true).with_cache(CacheMode::Both);
        assert_eq!(
            p.units,
            [
                (Method::Direct, 1),
                (Method::Direct, 4),
                (Method::Buffered, 1)
            ]
        );
        let steps = p.steps();
        // 2 situations × 2 rounds × 3 units, cold first.
        assert_eq!(steps.len(), 12);
        assert!(steps[..6].iter().all(|s| s.situation == Situation::Cold));
        assert!(steps[6..].iter().all(|s| s.situation == Situation::Warm));
        // Each round runs every unit once, and round 1 starts elsewhere.
        for round in steps.chunks(3) {
            let mut u: Vec<(Method, u32)> = round.iter().map(|s| (s.method, s.threads)).collect();
            u.sort();
            let mut want = p.units.clone();
            want.sort();
            assert_eq!(u, want);
        }
        assert_eq!((steps[0].method, steps[0].threads), (Method::Direct, 1));
        assert_eq!((steps[3].method, steps[3].threads), (Method::Direct, 4));
        assert_eq!(p.bounce_len, 0);
        assert_eq!(p.in_flight, o.chunk_bytes() * 4);
    }

    #[test]
    fn dontcache_is_left_out_where_it_does_not_work_and_direct_copy_gets_bounce_buffers() {
        let o = opts(&[Method::Dontcache, Method::DirectCopy], &[2]);
        let p = plan(&o, 100 << 20, false);
        assert_eq!(p.methods, [Method::Dontcache, Method::DirectCopy]);
        assert_eq!(p.runnable, [Method::DirectCopy]);
        assert_eq!(p.bounce_buffers, 2);
        assert_eq!(p.bounce_len, 2 * p.chunk);
        assert!(p.any_threaded());
        assert_eq!(p.situations(), [Situation::Cold]);
        let with = plan(&o, 100 << 20, true);
        assert_eq!(with.runnable, with.methods);
    }
}
