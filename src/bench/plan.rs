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
        let mut s = format!("bench {} in {} would:\n", self.mode, self.dir.display());
        for (i, step) in self.steps.iter().enumerate() {
            s.push_str(&format!("  {}. {step}\n", i + 1));
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

/// The suite.
pub fn suite(opts: &super::BenchOptions, fio: &std::path::Path, job_file: String) -> BenchPlan {
    let size = opts.size_bytes();
    let names: Vec<String> = opts.tests.iter().map(ToString::to_string).collect();
    let per_run = opts.duration_secs + opts.interval_secs;
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
            "run {} test{} × {} round{} × {} s{} with {}: {}",
            names.len(),
            if names.len() == 1 { "" } else { "s" },
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
        estimated_seconds: Some(names.len() as u64 * u64::from(opts.runs) * per_run),
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
