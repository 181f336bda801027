//! The tests, named as CrystalDiskMark names them (`SEQ1M Q8T1`), and the
//! profiles that group them.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// Sequential or random.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Pattern {
    /// Sequential.
    Seq,
    /// Random.
    Rnd,
}

/// Read or write.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    Serialize,
    Deserialize,
    schemars::JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum Direction {
    /// Reads.
    Read,
    /// Writes.
    Write,
    /// Reads and writes at once, [`MIX_READ_PERCENT`] of the I/Os reads
    /// (CrystalDiskMark's "Mix"), measured as one figure.
    Mix,
}

/// The share of reads in a [`Direction::Mix`] run, percent (CrystalDiskMark's
/// default mix, 7:3).
pub const MIX_READ_PERCENT: u32 = 70;

impl Direction {
    /// `read` / `write` / `mix`.
    pub fn as_str(self) -> &'static str {
        match self {
            Direction::Read => "read",
            Direction::Write => "write",
            Direction::Mix => "mix",
        }
    }

    /// From [`Direction::as_str`].
    pub fn parse(s: &str) -> Option<Direction> {
        match s {
            "read" => Some(Direction::Read),
            "write" => Some(Direction::Write),
            "mix" => Some(Direction::Mix),
            _ => None,
        }
    }

    /// The run writes.
    pub fn writes(self) -> bool {
        self != Direction::Read
    }

    /// The run reads.
    pub fn reads(self) -> bool {
        self != Direction::Write
    }
}

/// One test: pattern, block size, queue depth, threads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema)]
pub struct TestSpec {
    /// Sequential or random.
    pub(crate) pattern: Pattern,
    /// Bytes per I/O.
    pub block_bytes: u64,
    /// I/Os in flight per thread.
    pub(crate) queue_depth: u32,
    /// Threads (fio jobs), each on its own range of the file.
    pub threads: u32,
}

fn block_label(b: u64) -> String {
    if b >= 1 << 20 && b.is_multiple_of(1 << 20) {
        format!("{}M", b >> 20)
    } else {
        format!("{}K", b >> 10)
    }
}

impl fmt::Display for TestSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}{} Q{}T{}",
            match self.pattern {
                Pattern::Seq => "SEQ",
                Pattern::Rnd => "RND",
            },
            block_label(self.block_bytes),
            self.queue_depth,
            self.threads
        )
    }
}

impl TestSpec {
    const fn new(pattern: Pattern, block_bytes: u64, queue_depth: u32, threads: u32) -> Self {
        Self {
            pattern,
            block_bytes,
            queue_depth,
            threads,
        }
    }

    /// The fio section name (`SEQ1M-Q8T1-read`).
    pub fn section(&self, d: Direction) -> String {
        format!("{}-{}", self.to_string().replace(' ', "-"), d.as_str())
    }

    /// Parses `SEQ1M-Q8T1`, `seq1m q8t1`, `RND4K-Q32T16`.
    pub fn parse(text: &str) -> Result<Self> {
        let bad = || {
            Error::usage(format!("unknown test {text:?}")).with_hint(
                "name tests like CrystalDiskMark: SEQ1M-Q8T1, SEQ128K-Q32T1, RND4K-Q32T16 (block 4K..64M, Q1..256, T1..64)",
            )
        };
        let t = text.trim().to_ascii_uppercase().replace([' ', '_'], "-");
        let (pattern, rest) = if let Some(r) = t.strip_prefix("SEQ") {
            (Pattern::Seq, r)
        } else if let Some(r) = t.strip_prefix("RND") {
            (Pattern::Rnd, r)
        } else {
            return Err(bad());
        };
        let (block, rest) = rest.split_once("-Q").ok_or_else(bad)?;
        let (q, threads) = rest.split_once('T').ok_or_else(bad)?;
        let (num, unit) = block.split_at(block.len().saturating_sub(1));
        let mult = match unit {
            "K" => 1u64 << 10,
            "M" => 1 << 20,
            _ => return Err(bad()),
        };
        let block_bytes = num.parse::<u64>().map_err(|_| bad())? * mult;
        let queue_depth: u32 = q.parse().map_err(|_| bad())?;
        let threads: u32 = threads.parse().map_err(|_| bad())?;
        if !(4096..=64 << 20).contains(&block_bytes)
            || !block_bytes.is_multiple_of(4096)
            || !(1..=256).contains(&queue_depth)
            || !(1..=64).contains(&threads)
        {
            return Err(bad());
        }
        Ok(Self::new(pattern, block_bytes, queue_depth, threads))
    }
}

/// CrystalDiskMark's default set.
pub(crate) const DEFAULT_TESTS: [TestSpec; 4] = [
    TestSpec::new(Pattern::Seq, 1 << 20, 8, 1),
    TestSpec::new(Pattern::Seq, 1 << 20, 1, 1),
    TestSpec::new(Pattern::Rnd, 4 << 10, 32, 1),
    TestSpec::new(Pattern::Rnd, 4 << 10, 1, 1),
];

/// CrystalDiskMark's NVMe SSD set.
pub(crate) const NVME_TESTS: [TestSpec; 4] = [
    TestSpec::new(Pattern::Seq, 1 << 20, 8, 1),
    TestSpec::new(Pattern::Seq, 128 << 10, 32, 1),
    TestSpec::new(Pattern::Rnd, 4 << 10, 32, 16),
    TestSpec::new(Pattern::Rnd, 4 << 10, 1, 1),
];

/// CrystalDiskMark 8's "Peak Performance" profile: the deepest queues.
pub(crate) const PEAK_TESTS: [TestSpec; 2] = [
    TestSpec::new(Pattern::Seq, 1 << 20, 8, 1),
    TestSpec::new(Pattern::Rnd, 4 << 10, 32, 16),
];

/// CrystalDiskMark 8's "Real World Performance" profile: one I/O at a time.
pub(crate) const REAL_WORLD_TESTS: [TestSpec; 2] = [
    TestSpec::new(Pattern::Seq, 1 << 20, 1, 1),
    TestSpec::new(Pattern::Rnd, 4 << 10, 1, 1),
];

/// The profile names, in the order `--help` lists them.
pub const PROFILES: [&str; 4] = ["default", "nvme", "peak", "real-world"];

/// The tests of a profile name.
pub fn profile_tests(name: &str) -> Result<Vec<TestSpec>> {
    match name {
        "default" => Ok(DEFAULT_TESTS.to_vec()),
        "nvme" => Ok(NVME_TESTS.to_vec()),
        "peak" => Ok(PEAK_TESTS.to_vec()),
        "real-world" => Ok(REAL_WORLD_TESTS.to_vec()),
        _ => Err(Error::usage(format!("unknown profile {name:?}"))
            .with_hint("use --profile default, nvme, peak or real-world, or pick with --tests")),
    }
}

/// Parses a comma-separated `--tests` list; duplicates are dropped.
pub fn parse_tests(list: &str) -> Result<Vec<TestSpec>> {
    let mut out: Vec<TestSpec> = Vec::new();
    for item in list.split(',').filter(|s| !s.trim().is_empty()) {
        let t = TestSpec::parse(item)?;
        if !out.contains(&t) {
            out.push(t);
        }
    }
    if out.is_empty() {
        return Err(
            Error::usage("--tests is empty").with_hint("e.g. --tests SEQ1M-Q8T1,RND4K-Q32T1")
        );
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for t in DEFAULT_TESTS.iter().chain(NVME_TESTS.iter()) {
            assert_eq!(TestSpec::parse(&t.to_string()).unwrap(), *t);
        }
        assert_eq!(DEFAULT_TESTS[0].to_string(), "SEQ1M Q8T1");
        assert_eq!(NVME_TESTS[1].to_string(), "SEQ128K Q32T1");
        assert_eq!(
            NVME_TESTS[2].section(Direction::Write),
            "RND4K-Q32T16-write"
        );
        assert_eq!(TestSpec::parse("rnd4k-q32t16").unwrap(), NVME_TESTS[2]);
    }

    #[test]
    fn bad_names_are_usage_errors() {
        for bad in [
            "",
            "SEQ",
            "SEQ1G-Q1T1",
            "SEQ1M-Q0T1",
            "RND4K-Q1T65",
            "RND3K-Q1T1",
            "XYZ1M-Q1T1",
            "SEQ1M-Q1",
        ] {
            let e = TestSpec::parse(bad).unwrap_err();
            assert_eq!(e.exit_code(), 2, "{bad}");
        }
        assert_eq!(parse_tests("SEQ1M-Q1T1,seq1m-q1t1").unwrap().len(), 1);
        assert!(parse_tests(",").is_err());
        assert!(profile_tests("fast").is_err());
    }
}
