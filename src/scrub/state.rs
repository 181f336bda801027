//! Where the state of the last scrub of each filesystem is kept.

use std::path::{Path, PathBuf};

use super::SavedScrub;
use crate::error::Result;
use crate::sys::fs::root::SysRoot;
use crate::sys::fs::state::StateRoom;
use crate::sys::proc::task::stat_of;

/// btrfs-lab's state directory when `--state-dir` is not given (the scrub
/// state is in its `scrub/`).
pub use crate::sys::fs::state::STATE_DIR;

/// The process that runs a scrub now, and since when.
#[derive(serde::Serialize, serde::Deserialize)]
struct RunningScrub {
    pid: u32,
    /// Its start time after boot, clock ticks (tells a reused pid apart).
    start_ticks: u64,
    /// Seconds since the epoch.
    started_at: u64,
}

/// Where the state of `fsid`'s scrub is kept (`STATE_DIR/scrub/FSID.json`).
pub struct StateStore {
    room: StateRoom,
    state_dir: PathBuf,
}

impl StateStore {
    /// `state_dir`/scrub.
    pub fn new(state_dir: &Path) -> Self {
        StateStore {
            room: StateRoom::new(state_dir, "scrub"),
            state_dir: state_dir.to_path_buf(),
        }
    }

    /// The state directory it is a room of.
    pub fn state_dir(&self) -> &Path {
        &self.state_dir
    }

    /// The ledger of kernel settings in the same state directory
    /// (`STATE/settings`).
    pub fn ledger(&self) -> crate::sys::kernel::settings::Ledger {
        crate::sys::kernel::settings::Ledger::new(&self.state_dir)
    }

    fn name(fsid: &str) -> String {
        format!("{fsid}.json")
    }

    /// The state file of `fsid`.
    pub fn file(&self, fsid: &str) -> PathBuf {
        self.room.file(&Self::name(fsid))
    }

    /// The saved state of `fsid`, if any.
    pub fn load(&self, fsid: &str) -> Result<Option<SavedScrub>> {
        match self.room.read(&Self::name(fsid))? {
            Some(t) => SavedScrub::parse(&t, &self.file(fsid)).map(Some),
            None => Ok(None),
        }
    }

    /// True the first time `note` is asked about in this state directory
    /// (kept in `scrub/notes.json`), false after: a note about the host
    /// (suspend not held off) said once, not on every run. True when the
    /// list cannot be read or written (said again rather than never).
    pub fn first_time(&self, note: &str) -> bool {
        const NOTES: &str = "notes.json";
        let mut said: Vec<String> = match self.room.load(NOTES) {
            Ok(v) => v.unwrap_or_default(),
            Err(_) => return true,
        };
        if said.iter().any(|s| s == note) {
            return false;
        }
        said.push(note.to_owned());
        let _ = self.room.save(NOTES, &said);
        true
    }

    /// Notes that this process runs a scrub of `fsid` since `started_at`
    /// (`FSID.running.json`, for `--status`; left behind, it names a
    /// process that is gone and is ignored). Best effort.
    pub fn mark_running(&self, fsid: &str, started_at: u64) {
        let pid = std::process::id();
        if let Ok(st) = stat_of(&SysRoot::host(), pid) {
            let r = RunningScrub {
                pid,
                start_ticks: st.starttime,
                started_at,
            };
            let _ = self.room.save(&format!("{fsid}.running.json"), &r);
        }
    }

    /// When the btrfs-lab run scrubbing `fsid` now started, if one does.
    pub fn running_since(&self, fsid: &str) -> Option<u64> {
        let r: RunningScrub = self
            .room
            .load(&format!("{fsid}.running.json"))
            .ok()
            .flatten()?;
        let st = stat_of(&SysRoot::host(), r.pid).ok()?;
        (st.starttime == r.start_ticks && st.state != 'Z' && st.state != 'X')
            .then_some(r.started_at)
    }

    /// Replaces the saved state atomically.
    pub fn save(&self, s: &SavedScrub) -> Result<()> {
        self.room.save(&Self::name(&s.fsid), s)
    }
}
