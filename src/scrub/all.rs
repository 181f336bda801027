//! `scrub --all`: every mounted btrfs once (by UUID, whatever number of
//! mounts and subvolume mounts it has), the longest unscrubbed first,
//! skipping those whose last complete scrub is younger than `--min-age`,
//! resuming an interrupted one from its saved positions, at most
//! `--max-parallel` at once. Each filesystem is one `scrub MOUNT` (its own
//! plan, state, btrfs-progs record and report); this module chooses and
//! orders them ([`plan_all`], pure) and runs them ([`run`]).
//!
//! Scheduling is systemd's: `btrfs-lab-scrub.timer` runs
//! `btrfs-lab-scrub.service` (`scrub --all`) daily; no daemon of ours.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use serde::{Deserialize, Serialize};

use super::{StateStore, progs};
use crate::error::Result;
use crate::model::exit;
use crate::sys::fs::root::SysRoot;
use crate::sys::fs::target::btrfs_mounts;
use crate::sys::kernel::signals;

/// The timer shipped in `contrib/systemd/` (and the Debian package).
pub const TIMER: &str = "btrfs-lab-scrub.timer";
/// The service the timer starts: `btrfs-lab scrub --all`.
pub const SERVICE: &str = "btrfs-lab-scrub.service";

/// What `scrub --all` does with one filesystem.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum Choice {
    /// Continue its interrupted scrub from the saved positions.
    Resume,
    /// Scrub it (never scrubbed completely, or not within the minimum age).
    Scrub,
    /// Leave it: its last complete scrub is younger than the minimum age.
    Skip,
}

/// One mounted filesystem as `scrub --all` found it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Candidate {
    /// The mount point it is scrubbed through (the first in the mount table).
    pub mount_point: PathBuf,
    /// Its other mounts (subvolumes, bind mounts): not scrubbed again.
    pub also_mounted_at: Vec<PathBuf>,
    /// Filesystem UUID.
    pub fsid: String,
    /// When its last complete scrub ended (btrfs-lab's record or
    /// btrfs-progs', the newer), seconds since the epoch.
    pub last_complete: Option<u64>,
    /// btrfs-lab saved an interrupted scrub of it.
    pub interrupted: bool,
    /// Mounted read-only where it is scrubbed: only a read-only scrub can
    /// run there.
    pub read_only: bool,
}

/// One filesystem of the plan.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct AllEntry {
    /// The mount point it is scrubbed through.
    pub mount_point: PathBuf,
    /// Its other mounts, not scrubbed again.
    pub also_mounted_at: Vec<PathBuf>,
    /// Filesystem UUID.
    pub fsid: String,
    /// When its last complete scrub ended, seconds since the epoch (null:
    /// none on record).
    pub last_complete_at: Option<u64>,
    /// What is done with it.
    pub choice: Choice,
    /// Mounted read-only: scrubbed read-only (nothing is repaired).
    #[serde(default)]
    pub read_only: bool,
    /// Why, in words.
    pub reason: String,
}

/// The plan: the filesystems in the order they are scrubbed, the skipped
/// ones last.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct AllPlan {
    /// `--min-age`, seconds.
    pub min_age_seconds: u64,
    /// `--max-parallel`.
    pub max_parallel: usize,
    /// Every mounted btrfs once.
    pub entries: Vec<AllEntry>,
}

/// How one filesystem's scrub ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct AllResult {
    /// The mount point it was scrubbed through.
    pub mount_point: PathBuf,
    /// Filesystem UUID.
    pub fsid: String,
    /// Its `scrub MOUNT` exit status (0 clean, 3 corrected, 4
    /// uncorrectable, 1 refused or failed, 130 interrupted).
    pub exit_status: u8,
}

/// The end of `scrub --all`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct AllReport {
    /// The plan it ran.
    pub plan: AllPlan,
    /// One per filesystem scrubbed (or begun), in the order they ended.
    pub results: Vec<AllResult>,
    /// Filesystems not begun because a signal stopped the run.
    pub not_begun: Vec<PathBuf>,
}

impl AllReport {
    /// The run's exit status: 130 when a signal stopped it, else the worst
    /// of the filesystems' (4 damage found, then 1 a failure, then 3
    /// repaired), 0 when every one was clean or skipped.
    pub fn exit_code(&self) -> u8 {
        let (ok, corrected, damaged) = (
            exit::OK.code,
            exit::SCRUB_CORRECTED.code,
            exit::SCRUB_UNCORRECTABLE.code,
        );
        let any = |c: u8| self.results.iter().any(|r| r.exit_status == c);
        if any(exit::INTERRUPTED.code) || !self.not_begun.is_empty() {
            exit::INTERRUPTED.code
        } else if any(damaged) {
            damaged
        } else if self
            .results
            .iter()
            .any(|r| ![ok, corrected].contains(&r.exit_status))
        {
            exit::ERROR.code
        } else if any(corrected) {
            corrected
        } else {
            ok
        }
    }
}

/// Chooses and orders (pure): an interrupted scrub is resumed; a
/// filesystem never scrubbed completely, or not within `min_age` seconds
/// of `now`, is scrubbed, the longest unscrubbed first; the rest are
/// skipped.
pub fn plan_all(
    candidates: Vec<Candidate>,
    now: u64,
    min_age: u64,
    max_parallel: usize,
) -> AllPlan {
    let days = |s: u64| s / 86_400;
    let ago = |s: u64| match s {
        s if s >= 2 * 86_400 => format!("{} days ago", s / 86_400),
        s if s >= 2 * 3_600 => format!("{} hours ago", s / 3_600),
        _ => "within the last two hours".to_owned(),
    };
    let mut entries: Vec<AllEntry> = candidates
        .into_iter()
        .map(|c| {
            let age = c.last_complete.map(|t| now.saturating_sub(t));
            let (choice, reason) = if c.interrupted {
                (
                    Choice::Resume,
                    "its last scrub was interrupted: it goes on from the saved positions"
                        .to_owned(),
                )
            } else {
                match age {
                    None => (Choice::Scrub, "no complete scrub on record".to_owned()),
                    Some(a) if a >= min_age => {
                        (Choice::Scrub, format!("last complete scrub {}", ago(a)))
                    }
                    Some(a) => (
                        Choice::Skip,
                        format!(
                            "scrubbed {}, within --min-age ({} days)",
                            ago(a),
                            days(min_age)
                        ),
                    ),
                }
            };
            AllEntry {
                mount_point: c.mount_point,
                also_mounted_at: c.also_mounted_at,
                fsid: c.fsid,
                last_complete_at: c.last_complete,
                choice,
                read_only: c.read_only,
                reason: if c.read_only && choice != Choice::Skip {
                    format!("{reason}; mounted read-only: nothing is repaired")
                } else {
                    reason
                },
            }
        })
        .collect();
    // Resumes first, then the oldest complete scrub (none: oldest of
    // all), the skipped last; ties by mount point.
    let rank = |e: &AllEntry| {
        (
            match e.choice {
                Choice::Resume => 0,
                Choice::Scrub => 1,
                Choice::Skip => 2,
            },
            e.last_complete_at.unwrap_or(0),
            e.mount_point.clone(),
        )
    };
    entries.sort_by_key(rank);
    AllPlan {
        min_age_seconds: min_age,
        max_parallel: max_parallel.max(1),
        entries,
    }
}

/// Every mounted btrfs once, with its records: btrfs-lab's state in
/// `store` and btrfs-progs' record. Under `only_under` (a test's own
/// mounts) when given.
pub fn candidates(store: &StateStore, only_under: Option<&Path>) -> Result<Vec<Candidate>> {
    let root = SysRoot::host();
    let mut out = Vec::new();
    for (fsid, mounts) in btrfs_mounts(&root)? {
        let mut mounts = mounts;
        if let Some(dir) = only_under {
            mounts.retain(|m| m.mount_point.starts_with(dir));
        }
        // A read-write mount where there is one: a scrub there repairs.
        let Some(at) = mounts
            .iter()
            .position(|m| !m.is_read_only())
            .or((!mounts.is_empty()).then_some(0))
        else {
            continue;
        };
        let chosen = mounts.remove(at);
        let read_only = chosen.is_read_only();
        let mount_point = chosen.mount_point;
        let points: Vec<PathBuf> = mounts.into_iter().map(|m| m.mount_point).collect();
        // A state file that cannot be read is no record (scrub MOUNT says
        // why when it runs).
        let saved = store.load(&fsid).ok().flatten().filter(|s| s.fsid == fsid);
        let lab = saved.as_ref().filter(|s| s.finished).map(|s| s.saved_at);
        let progs_devices = progs::read(&fsid);
        let progs_done = (!progs_devices.is_empty() && progs_devices.iter().all(|d| d.finished))
            .then(|| {
                progs_devices
                    .iter()
                    .map(|d| d.started + d.duration)
                    .max()
                    .unwrap_or(0)
            })
            .filter(|&t| t > 0);
        out.push(Candidate {
            mount_point,
            also_mounted_at: points,
            fsid,
            last_complete: lab.max(progs_done),
            interrupted: saved.is_some_and(|s| !s.finished),
            read_only,
        });
    }
    Ok(out)
}

/// Runs the plan: `scrub` is one filesystem's `scrub MOUNT` (its exit
/// status), called for each entry not skipped, at most `max_parallel` at
/// once, each on a thread of its own. After a signal no further
/// filesystem begins; those running stop at their next safe point.
pub fn run(plan: &AllPlan, scrub: &(dyn Fn(&AllEntry) -> u8 + Sync)) -> AllReport {
    let todo: Vec<&AllEntry> = plan
        .entries
        .iter()
        .filter(|e| e.choice != Choice::Skip)
        .collect();
    let next = Mutex::new(0usize);
    let results = Mutex::new(Vec::new());
    let not_begun = Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for _ in 0..plan.max_parallel.min(todo.len()).max(1) {
            s.spawn(|| {
                loop {
                    let i = {
                        let mut n = next.lock().unwrap_or_else(|e| e.into_inner());
                        let i = *n;
                        *n += 1;
                        i
                    };
                    let Some(e) = todo.get(i) else { break };
                    if signals::interrupted() {
                        not_begun
                            .lock()
                            .unwrap_or_else(|e| e.into_inner())
                            .push(e.mount_point.clone());
                        continue;
                    }
                    let status = scrub(e);
                    results
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .push(AllResult {
                            mount_point: e.mount_point.clone(),
                            fsid: e.fsid.clone(),
                            exit_status: status,
                        });
                }
            });
        }
    });
    AllReport {
        plan: plan.clone(),
        results: results.into_inner().unwrap_or_else(|e| e.into_inner()),
        not_begun: not_begun.into_inner().unwrap_or_else(|e| e.into_inner()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DAY: u64 = 86_400;
    const NOW: u64 = 1_000 * DAY;

    fn cand(m: &str, last: Option<u64>, interrupted: bool) -> Candidate {
        Candidate {
            mount_point: m.into(),
            also_mounted_at: Vec::new(),
            fsid: format!("fsid-{m}"),
            last_complete: last,
            interrupted,
            read_only: false,
        }
    }

    #[test]
    fn resumes_first_then_the_longest_unscrubbed_and_skips_the_recent() {
        let p = plan_all(
            vec![
                cand("/recent", Some(NOW - 3 * DAY), false),
                cand("/old", Some(NOW - 40 * DAY), false),
                cand("/never", None, false),
                cand("/cut", Some(NOW - 2 * DAY), true),
                cand("/older", Some(NOW - 90 * DAY), false),
            ],
            NOW,
            30 * DAY,
            1,
        );
        let order: Vec<(&str, Choice)> = p
            .entries
            .iter()
            .map(|e| (e.mount_point.to_str().unwrap(), e.choice))
            .collect();
        assert_eq!(
            order,
            [
                ("/cut", Choice::Resume),
                ("/never", Choice::Scrub),
                ("/older", Choice::Scrub),
                ("/old", Choice::Scrub),
                ("/recent", Choice::Skip),
            ]
        );
        assert_eq!(
            p.entries[4].reason,
            "scrubbed 3 days ago, within --min-age (30 days)"
        );
        assert_eq!(p.entries[3].reason, "last complete scrub 40 days ago");
    }

    #[test]
    fn a_minimum_age_of_zero_scrubs_everything() {
        let p = plan_all(vec![cand("/a", Some(NOW), false)], NOW, 0, 0);
        assert_eq!(p.entries[0].choice, Choice::Scrub);
        assert_eq!(p.max_parallel, 1);
    }

    fn entry(m: &str, choice: Choice) -> AllEntry {
        AllEntry {
            mount_point: m.into(),
            also_mounted_at: Vec::new(),
            fsid: m.into(),
            last_complete_at: None,
            choice,
            read_only: false,
            reason: String::new(),
        }
    }

    #[test]
    fn runs_each_chosen_filesystem_once_at_most_n_at_once() {
        let plan = AllPlan {
            min_age_seconds: 0,
            max_parallel: 2,
            entries: vec![
                entry("/a", Choice::Scrub),
                entry("/b", Choice::Resume),
                entry("/c", Choice::Scrub),
                entry("/d", Choice::Skip),
            ],
        };
        let running = std::sync::atomic::AtomicUsize::new(0);
        let most = std::sync::atomic::AtomicUsize::new(0);
        let seen = Mutex::new(Vec::new());
        let r = run(&plan, &|e| {
            use std::sync::atomic::Ordering::SeqCst;
            let now = running.fetch_add(1, SeqCst) + 1;
            most.fetch_max(now, SeqCst);
            std::thread::sleep(std::time::Duration::from_millis(30));
            seen.lock().unwrap().push(e.mount_point.clone());
            running.fetch_sub(1, SeqCst);
            if e.mount_point == Path::new("/b") {
                3
            } else {
                0
            }
        });
        let mut seen = seen.into_inner().unwrap();
        seen.sort();
        assert_eq!(seen, [PathBuf::from("/a"), "/b".into(), "/c".into()]);
        assert!(most.load(std::sync::atomic::Ordering::SeqCst) <= 2);
        assert_eq!(r.results.len(), 3);
        assert_eq!(r.exit_code(), exit::SCRUB_CORRECTED.code);
    }

    #[test]
    fn the_worst_status_is_the_run_s() {
        let r = |codes: &[u8], not_begun: usize| AllReport {
            plan: AllPlan {
                min_age_seconds: 0,
                max_parallel: 1,
                entries: Vec::new(),
            },
            results: codes
                .iter()
                .map(|&c| AllResult {
                    mount_point: "/m".into(),
                    fsid: "f".into(),
                    exit_status: c,
                })
                .collect(),
            not_begun: vec![PathBuf::from("/n"); not_begun],
        };
        assert_eq!(r(&[], 0).exit_code(), 0);
        assert_eq!(r(&[0, 3], 0).exit_code(), 3);
        assert_eq!(r(&[3, 1], 0).exit_code(), 1);
        assert_eq!(r(&[1, 4], 0).exit_code(), 4);
        assert_eq!(r(&[4, 130], 0).exit_code(), 130);
        assert_eq!(r(&[0], 1).exit_code(), 130);
    }
}
