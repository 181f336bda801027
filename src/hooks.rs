//! Test hooks: the one protocol by which an integration test acts inside a
//! run. Only builds with the `test-hooks` cargo feature have them (release
//! builds do not enable it); without it every hook here is inert and
//! compiles to nothing.
//!
//! Each hook point has one name, a variant of [`Switch`] or [`Pause`], and
//! a test acts at it one way:
//! - a [`Switch`] changes what the run does: the test sets the switch's
//!   variable ([`Switch::env`], e.g. `BTRFS_LAB_PROBE_NO_TRACE=1`); a value
//!   that is empty or `0` is unset. Some take a value
//!   (`BTRFS_LAB_BENCH_COMPRESSIBLE=90`).
//! - a [`Pause`] stops the run at a point: the test sets
//!   `BTRFS_LAB_TEST_PAUSE=POINT` ([`PAUSE_ENV`], POINT as
//!   [`Pause::name`]); the first time the run gets there it prints
//!   `btrfs-lab: test hook: paused at POINT ...` on stderr and waits for a
//!   signal (the test kills it there, or SIGINTs it: the run goes on as
//!   interrupted). `POINT:PATH` waits until PATH exists instead, then goes
//!   on (the test changes the world meanwhile). Never longer than ten
//!   minutes, so a broken test cannot hang forever.

use crate::error::Result;

/// The variable a test sets to pause a run ([`Pause`]).
pub const PAUSE_ENV: &str = "BTRFS_LAB_TEST_PAUSE";

/// A hook that changes what the run does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Switch {
    /// `probe-dio` skips its up-front free-space check, so a test reaches
    /// the mid-write ENOSPC path.
    ProbeSkipSpaceCheck,
    /// `probe-dio` acts as if the per-file tracepoint were unavailable, so
    /// a test sees the counters decide.
    ProbeNoTrace,
    /// `read-test` skips the eviction and its mincore check, as if both had
    /// silently failed, so a test shows that the device cross-check alone
    /// catches a warm cache (the report says the hook was set).
    ReadTestSkipEviction,
    /// `bench` multiplies the bytes (and rates) fio reports by the value,
    /// as a lying benchmark would.
    BenchScaleClaimed,
    /// `bench` runs fio without O_DIRECT and skips the eviction, as on a
    /// filesystem that ignores O_DIRECT (a warm page cache).
    BenchBuffered,
    /// `bench`: percent of compressible data in what fio writes.
    BenchCompressible,
    /// `bench` fallocates the test file instead of writing it (reads of a
    /// never-written region).
    BenchFallocateOnly,
    /// `bench --sustained` joins this cgroup directory before fio starts
    /// (fio inherits it; the test throttles the cgroup's writes).
    BenchCgroup,
    /// `scrub` writes btrfs-progs' scrub record in this directory instead
    /// of `/var/lib/btrfs` (a test's filesystems leave nothing there).
    ScrubProgsDir,
    /// `scrub --all` takes only the mounts under this directory (a test's
    /// own, never the machine's other filesystems).
    ScrubAllUnder,
}

impl Switch {
    /// The variable a test sets.
    pub const fn env(self) -> &'static str {
        match self {
            Switch::ProbeSkipSpaceCheck => "BTRFS_LAB_PROBE_SKIP_SPACE_CHECK",
            Switch::ProbeNoTrace => "BTRFS_LAB_PROBE_NO_TRACE",
            Switch::ReadTestSkipEviction => "BTRFS_LAB_READ_TEST_SKIP_EVICTION",
            Switch::BenchScaleClaimed => "BTRFS_LAB_BENCH_SCALE_CLAIMED",
            Switch::BenchBuffered => "BTRFS_LAB_BENCH_BUFFERED",
            Switch::BenchCompressible => "BTRFS_LAB_BENCH_COMPRESSIBLE",
            Switch::BenchFallocateOnly => "BTRFS_LAB_BENCH_FALLOCATE_ONLY",
            Switch::BenchCgroup => "BTRFS_LAB_BENCH_CGROUP",
            Switch::ScrubProgsDir => "BTRFS_LAB_SCRUB_PROGS_DIR",
            Switch::ScrubAllUnder => "BTRFS_LAB_SCRUB_ALL_UNDER",
        }
    }

    /// The switch's value when a test set it (not empty, not `0`); always
    /// `None` without the `test-hooks` feature.
    pub fn value(self) -> Option<String> {
        #[cfg(feature = "test-hooks")]
        {
            std::env::var(self.env())
                .ok()
                .filter(|v| !v.is_empty() && v != "0")
        }
        #[cfg(not(feature = "test-hooks"))]
        {
            None
        }
    }

    /// True when a test set the switch ([`Switch::value`]).
    pub(crate) fn is_on(self) -> bool {
        self.value().is_some()
    }
}

/// A point where a test can stop the run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pause {
    /// `probe-dio`: after the first block of its first test file.
    ProbeWritten,
    /// `read-test`: the first mmap pass, after its first 2 MiB window (a
    /// test truncates the file in the middle of a mapped read).
    ReadTestMmap,
    /// `nocow --migrate`: after the first chunk of the first copy.
    NocowCopy,
    /// `nocow --migrate`: the copy has its temporary name, before the
    /// exchange.
    NocowLinked,
    /// `nocow --migrate`: right after the exchange (the original under the
    /// temporary name, the copy under the file's).
    NocowSwapped,
    /// `convert`: confirmed, before anything is done.
    ConvertConfirmed,
    /// `device add`: confirmed, before anything is done.
    DeviceAddConfirmed,
    /// `balance`: confirmed, before anything is done.
    BalanceConfirmed,
    /// `balance`: the kernel runs the balance (its first chunk; a test
    /// sends Ctrl-C there: the balance pauses after that chunk).
    BalanceRunning,
    /// `reclaim`: a step has ended without reaching the goal, before the
    /// next one starts (a test interrupts the run there and runs it again).
    ReclaimStepped,
    /// `rescue --copy-to`: the first file is judged, copied and in the
    /// manifest (a test interrupts the copy there and resumes it).
    RescueCopied,
    /// `rescue --copy-to`: the first block of a file larger than a block
    /// is copied, the rest not yet (a test sends Ctrl-C in the middle of a
    /// file: it must be seen before the next block).
    RescueBlock,
    /// `device replace --scrub`: the replace is done and verified, the
    /// scrub of the new device about to start (a test interrupts it there).
    DeviceReplaceScrubbing,
}

/// Every pause point, for [`Pause::named`].
const PAUSES: [Pause; 13] = [
    Pause::ProbeWritten,
    Pause::ReadTestMmap,
    Pause::NocowCopy,
    Pause::NocowLinked,
    Pause::NocowSwapped,
    Pause::ConvertConfirmed,
    Pause::DeviceAddConfirmed,
    Pause::BalanceConfirmed,
    Pause::BalanceRunning,
    Pause::ReclaimStepped,
    Pause::RescueCopied,
    Pause::RescueBlock,
    Pause::DeviceReplaceScrubbing,
];

impl Pause {
    /// The point's name, as `BTRFS_LAB_TEST_PAUSE` gives it.
    pub const fn name(self) -> &'static str {
        match self {
            Pause::ProbeWritten => "probe-written",
            Pause::ReadTestMmap => "read-test-mmap",
            Pause::NocowCopy => "nocow-copy",
            Pause::NocowLinked => "nocow-linked",
            Pause::NocowSwapped => "nocow-swapped",
            Pause::ConvertConfirmed => "convert-confirmed",
            Pause::DeviceAddConfirmed => "device-add-confirmed",
            Pause::BalanceConfirmed => "balance-confirmed",
            Pause::BalanceRunning => "balance-running",
            Pause::ReclaimStepped => "reclaim-stepped",
            Pause::RescueCopied => "rescue-copied",
            Pause::RescueBlock => "rescue-block",
            Pause::DeviceReplaceScrubbing => "device-replace-scrubbing",
        }
    }

    /// The point called `name`.
    pub fn named(name: &str) -> Option<Pause> {
        PAUSES.into_iter().find(|p| p.name() == name)
    }

    /// The line the run prints on stderr when it pauses here (what a test
    /// waits for).
    pub fn message(self) -> String {
        format!("btrfs-lab: test hook: paused at {}", self.name())
    }

    /// The value of [`PAUSE_ENV`] that pauses here until `go` exists.
    pub fn until(self, go: &std::path::Path) -> String {
        format!("{}:{}", self.name(), go.display())
    }

    /// Pauses here when a test asked for it (see the module docs), the
    /// first time this process gets here; `about` is added to the line on
    /// stderr (` of /path`). `Err(interrupted)` when a signal arrived while
    /// waiting (as the run's own checks would give it); `Ok` once PATH
    /// exists or `stop` says the run is being stopped anyway. Nothing
    /// without the `test-hooks` feature.
    pub fn here(self, about: &str, stop: &dyn Fn() -> bool) -> Result<()> {
        #[cfg(feature = "test-hooks")]
        {
            imp::pause(self, about, stop)
        }
        #[cfg(not(feature = "test-hooks"))]
        {
            let _ = (about, stop);
            Ok(())
        }
    }
}

#[cfg(feature = "test-hooks")]
mod imp {
    use std::path::PathBuf;
    use std::sync::Mutex;
    use std::time::{Duration, Instant};

    use super::{PAUSE_ENV, Pause};
    use crate::error::Result;
    use crate::sys::kernel::signals;

    /// The points this process has paused at already.
    static PAUSED: Mutex<Vec<Pause>> = Mutex::new(Vec::new());

    /// What [`PAUSE_ENV`] asks for: the point, and the path to wait for.
    pub(super) fn asked(value: &str) -> Option<(Pause, Option<PathBuf>)> {
        let (name, go) = match value.split_once(':') {
            Some((n, p)) => (n, Some(PathBuf::from(p))),
            None => (value, None),
        };
        Some((Pause::named(name)?, go))
    }

    pub(super) fn pause(point: Pause, about: &str, stop: &dyn Fn() -> bool) -> Result<()> {
        let Ok(v) = std::env::var(PAUSE_ENV) else {
            return Ok(());
        };
        let Some((asked, go)) = asked(&v) else {
            return Ok(());
        };
        if asked != point {
            return Ok(());
        }
        {
            let mut paused = PAUSED.lock().unwrap_or_else(|e| e.into_inner());
            if paused.contains(&point) {
                return Ok(());
            }
            paused.push(point);
        }
        eprintln!("{}{about}", point.message());
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(600) {
            signals::check()?;
            if stop() || go.as_deref().is_some_and(std::path::Path::exists) {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(())
    }
}

#[cfg(all(test, feature = "test-hooks"))]
mod tests {
    use super::*;

    #[test]
    fn every_pause_is_named_once_and_found_by_its_name() {
        for p in PAUSES {
            assert_eq!(Pause::named(p.name()), Some(p));
            assert_eq!(PAUSES.iter().filter(|q| q.name() == p.name()).count(), 1);
        }
        assert_eq!(Pause::named("written"), None);
        assert_eq!(
            imp::asked("nocow-linked:/tmp/go"),
            Some((Pause::NocowLinked, Some("/tmp/go".into())))
        );
        assert_eq!(
            imp::asked("probe-written"),
            Some((Pause::ProbeWritten, None))
        );
        assert_eq!(imp::asked("nosuch:/x"), None);
        assert_eq!(
            Pause::ReadTestMmap.until(std::path::Path::new("/t/go")),
            "read-test-mmap:/t/go"
        );
    }

    #[test]
    fn switch_variables_are_distinct() {
        let all = [
            Switch::ProbeSkipSpaceCheck,
            Switch::ProbeNoTrace,
            Switch::ReadTestSkipEviction,
            Switch::BenchScaleClaimed,
            Switch::BenchBuffered,
            Switch::BenchCompressible,
            Switch::BenchFallocateOnly,
            Switch::BenchCgroup,
            Switch::ScrubProgsDir,
            Switch::ScrubAllUnder,
        ];
        let mut names: Vec<&str> = all.iter().map(|s| s.env()).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), all.len());
        assert!(names.iter().all(|n| n.starts_with("BTRFS_LAB_")));
        assert!(!names.contains(&PAUSE_ENV));
    }
}
