//! What a bench run would do, for `--dry-run` in every mode (the suite,
//! `--sustained`, `--small-files`): the steps in order, the bytes it would
//! write and about how long it takes, after every refusal a real run makes
//! first (DIR, space, fio). Nothing is written.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::parse::size::format_iec;

/// The plan of one bench run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct BenchPlan {
    /// `suite`, `sustained` or `small-files`.
    pub mode: String,
    /// DIR.
    pub dir: PathBuf,
    /// What it would do, in order.
    pub steps: Vec<String>,
    /// Bytes of test data it would write.
    pub writes_bytes: u64,
    /// About how long the runs take (without the fill), when known.
    pub estimated_seconds: Option<u64>,
    /// The fio job file it would run (the suite).
    pub job_file: Option<String>,
}

impl BenchPlan {
    /// The text `--dry-run` prints.
    pub fn describe(&self) -> String {
        let mut s = crate::report::text::wrap(
            &format!("bench {} in {} would:", self.mode, self.dir.display()),
            "",
        );
        for (i, step) in self.steps.iter().enumerate() {
            s.push_str(&crate::report::text::wrap_hanging(
                step,
                &format!("  {}. ", i + 1),
                "     ",
            ));
        }
        if let Some(t) = self.estimated_seconds {
            s.push_str(&format!("about {}m{:02}s of runs", t / 60, t % 60));
            s.push_str(if self.mode == "suite" {
                ", plus the fill\n"
            } else {
                "\n"
            });
        }
        s.push_str("nothing was written (--dry-run)\n");
        s
    }
}

const WORK_DIR: &str =
    "make a work directory in DIR (held open; removed at the end, also on Ctrl-C)";
const REMOVE: &str = "remove the work directory and everything in it";

/// Seconds of fio runs the suite takes: every test for reads, then for
/// writes (and with `--mix` once more as a mix), `--rounds` runs of
/// `--duration` each, `--interval` between two runs; with `--members`, one
/// run per member device alone and one of all at once. The fill, the
/// eviction before each read and fio's start are not counted.
pub fn suite_seconds(opts: &super::BenchOptions, member_devices: usize) -> u64 {
    let directions: u64 = if opts.mix { 3 } else { 2 };
    let runs = opts.tests.len() as u64 * directions * u64::from(opts.runs);
    let members = if opts.members {
        member_devices as u64 + 1
    } else {
        0
    };
    (runs + members) * opts.duration_secs + runs.saturating_sub(1) * opts.interval_secs
}

/// The suite; `member_devices` is how many members `--members` reads.
pub fn suite(
    opts: &super::BenchOptions,
    fio: &std::path::Path,
    job_file: String,
    member_devices: usize,
) -> BenchPlan {
    let size = opts.size_bytes();
    let names: Vec<String> = opts.tests.iter().map(ToString::to_string).collect();
    let mut steps = vec![
        WORK_DIR.to_owned(),
        format!(
            "fill the {} test file {} with incompressible data{}",
            format_iec(size),
            super::TEST_FILE,
            if opts.cow {
                " (--cow: data checksums kept)"
            } else {
                " (NOCOW)"
            }
        ),
        format!(
            "run {} test{} × {} ({}) × {} round{} × {} s{} with {}: {}",
            names.len(),
            if names.len() == 1 { "" } else { "s" },
            if opts.mix { 3 } else { 2 },
            if opts.mix {
                "read, write, mix"
            } else {
                "read, write"
            },
            opts.runs,
            if opts.runs == 1 { "" } else { "s" },
            opts.duration_secs,
            if opts.interval_secs > 0 {
                format!(", {} s apart", opts.interval_secs)
            } else {
                String::new()
            },
            fio.display(),
            names.join(", ")
        ),
    ];
    if opts.members {
        steps.push("read each member device alone, then all at once (read-only)".to_owned());
    }
    steps.push(REMOVE.to_owned());
    BenchPlan {
        mode: "suite".into(),
        dir: opts.dir.clone(),
        steps,
        writes_bytes: size,
        estimated_seconds: Some(suite_seconds(opts, member_devices)),
        job_file: Some(job_file),
    }
}

/// `--sustained`.
pub fn sustained(
    opts: &super::sustained::SustainedOptions,
    plan: &super::sustained::SustainedPlan,
) -> BenchPlan {
    BenchPlan {
        mode: "sustained".into(),
        dir: opts.dir.clone(),
        steps: vec![WORK_DIR.to_owned(), plan.warning.clone(), REMOVE.to_owned()],
        writes_bytes: plan.size,
        estimated_seconds: opts.time_limit_secs,
        job_file: None,
    }
}

/// `--small-files`; `root` says whether the stat phase would be cold (the
/// storm's own memory cgroup, or `--drop-caches`, need root).
pub fn small_files(opts: &super::metadata::MetadataOptions, root: bool) -> BenchPlan {
    use super::metadata::ColdMethod;
    let own = opts.cold == ColdMethod::OwnCgroup && root;
    BenchPlan {
        mode: "small-files".into(),
        dir: opts.dir.clone(),
        steps: vec![
            WORK_DIR.to_owned(),
            format!(
                "create {} empty files with {} thread{}{}, then syncfs",
                opts.files,
                opts.threads,
                if opts.threads == 1 { "" } else { "s" },
                if own {
                    " in a memory cgroup of the storm's own (when one can be made)"
                } else {
                    ""
                }
            ),
            match opts.cold {
                ColdMethod::DropCaches => "sync and drop the kernel's page, dentry and inode caches of every filesystem of this machine (--drop-caches), so the stat phase is cold".to_owned(),
                ColdMethod::OwnCgroup if root => "reclaim that memory cgroup: the storm's own dentries and inodes are evicted, nothing else of the machine's, so the stat phase is cold (btrfs's metadata blocks stay in memory); without one it is warm".to_owned(),
                ColdMethod::OwnCgroup => "evict nothing (not root), so the stat phase is warm".to_owned(),
                ColdMethod::Warm => "evict nothing, so the stat phase is warm".to_owned(),
            },
            format!("stat the {} files", opts.files),
            "delete them, then syncfs".to_owned(),
            REMOVE.to_owned(),
        ],
        writes_bytes: 0,
        estimated_seconds: None,
        job_file: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::profile::DEFAULT_TESTS;

    fn opts() -> crate::bench::BenchOptions {
        let mut o = crate::bench::BenchOptions::new("/mnt");
        o.tests = DEFAULT_TESTS[..2].to_vec();
        o.runs = 3;
        o.duration_secs = 2;
        o
    }

    #[test]
    fn the_estimate_counts_reads_and_writes() {
        // 2 tests × (read, write) × 3 rounds × 2 s: 24 s, not 12.
        let mut o = opts();
        assert_eq!(suite_seconds(&o, 3), 24);
        let p = suite(&o, std::path::Path::new("/usr/bin/fio"), String::new(), 3);
        assert_eq!(p.estimated_seconds, Some(24));
        assert!(
            p.steps[2].starts_with("run 2 tests × 2 (read, write) × 3 rounds × 2 s"),
            "{p:?}"
        );
        assert!(p.describe().contains("about 0m24s of runs, plus the fill"));
        // --mix: a third run of each test.
        o.mix = true;
        assert_eq!(suite_seconds(&o, 3), 36);
        // --interval between two runs (not after the last one).
        o.mix = false;
        o.interval_secs = 1;
        assert_eq!(suite_seconds(&o, 3), 24 + 11);
        // --members: each member alone and all at once, one duration each.
        o.interval_secs = 0;
        o.members = true;
        assert_eq!(suite_seconds(&o, 3), 24 + 4 * 2);
    }
}
