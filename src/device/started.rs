//! What `device replace` and `device remove` asked the kernel to do,
//! recorded in root's state directory (`STATE/device/FSID-replace.json`,
//! `FSID-remove.json`, written atomically by the safe writer) before the
//! kernel is asked. A re-run says "already done" only for what it can tie
//! to such a record: NEW already being device N is the end of a replace
//! only if this tool started that very replace (filesystem, devid, NEW's
//! path and device number); a device that is no longer a member is the
//! end of a remove only if this tool started removing it. Anything else is
//! what it looks like: a device that is already a member (a refusal), or
//! one that never was.

use std::path::{Path, PathBuf};

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::sys::fs::state::StateRoom;

/// A block device as it was when the operation began.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeviceAt {
    /// Its path (canonical).
    pub path: String,
    /// Its `major:minor`, when it was a block device.
    pub devt: Option<(u32, u32)>,
}

impl DeviceAt {
    /// The device at `path` now: the same path and device number as
    /// recorded (a loop device detached and attached to another file keeps
    /// its number; the tie also needs the filesystem and the devid).
    pub fn is(&self, path: &Path, devt: Option<(u32, u32)>) -> bool {
        !self.path.is_empty() && Path::new(&self.path) == path && self.devt == devt
    }
}

/// A replace this tool started.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StartedReplace {
    /// Filesystem UUID.
    pub fsid: String,
    /// The devid replaced (NEW takes it over).
    pub devid: u64,
    /// OLD's path then (empty when it was missing).
    pub old_path: String,
    /// NEW.
    pub new: DeviceAt,
    /// Seconds since the epoch when it was started.
    pub started_unix: u64,
}

/// One device a remove this tool started was to take out.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RemovingDevice {
    /// Its devid.
    pub devid: u64,
    /// The device (path empty when it was missing).
    pub device: DeviceAt,
}

/// A remove this tool started.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StartedRemove {
    /// Filesystem UUID.
    pub fsid: String,
    /// The devices, in the plan's order.
    pub devices: Vec<RemovingDevice>,
    /// Seconds since the epoch when it was started.
    pub started_unix: u64,
}

/// Now, in seconds since the epoch.
pub fn now_unix() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// `STATE/device`: where the records are (a [`StateRoom`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StartedStore {
    room: StateRoom,
}

impl StartedStore {
    /// The records under `state_dir` (btrfs-lab's state directory).
    pub fn new(state_dir: &Path) -> Self {
        Self {
            room: StateRoom::new(state_dir, "device"),
        }
    }

    /// Where the record of `fsid`'s `what` (replace, remove) is.
    pub fn file(&self, fsid: &str, what: &str) -> PathBuf {
        self.room.file(&Self::name(fsid, what))
    }

    fn name(fsid: &str, what: &str) -> String {
        format!("{fsid}-{what}.json")
    }

    /// The record, if there is one that can be read. One that cannot (not
    /// ours, damaged) ties nothing: the caller then treats what it finds as
    /// it looks, which never claims "done".
    fn load<T: DeserializeOwned>(&self, fsid: &str, what: &str) -> Option<T> {
        self.room.load(&Self::name(fsid, what)).ok().flatten()
    }

    fn save<T: Serialize>(&self, fsid: &str, what: &str, record: &T) -> Result<()> {
        self.room
            .save(&Self::name(fsid, what), record)
            .map_err(|e| self.unwritable(&e))
    }

    fn unwritable(&self, e: &Error) -> Error {
        Error::new(
            e.kind(),
            format!(
                "cannot record the operation in {}: {} (nothing was started)",
                self.room.dir().display(),
                e.message()
            ),
        )
        .with_hint("a re-run needs it to tell a finished operation from a device that was always there; give a directory root owns with --state-dir DIR")
    }

    /// The last replace started on `fsid`.
    pub fn replace(&self, fsid: &str) -> Option<StartedReplace> {
        self.load(fsid, "replace")
    }

    /// Records a replace about to start.
    pub fn save_replace(&self, r: &StartedReplace) -> Result<()> {
        self.save(&r.fsid, "replace", r)
    }

    /// The last remove started on `fsid`.
    pub fn remove(&self, fsid: &str) -> Option<StartedRemove> {
        self.load(fsid, "remove")
    }

    /// Records a remove about to start.
    pub fn save_remove(&self, r: &StartedRemove) -> Result<()> {
        self.save(&r.fsid, "remove", r)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip_and_a_damaged_one_ties_nothing() {
        let t = tempfile::tempdir().unwrap();
        let s = StartedStore::new(t.path());
        assert_eq!(s.replace("f"), None);
        let r = StartedReplace {
            fsid: "f".into(),
            devid: 2,
            old_path: "/dev/loop1".into(),
            new: DeviceAt {
                path: "/dev/loop9".into(),
                devt: Some((7, 9)),
            },
            started_unix: 1,
        };
        s.save_replace(&r).unwrap();
        assert_eq!(s.replace("f"), Some(r.clone()));
        assert!(r.new.is(Path::new("/dev/loop9"), Some((7, 9))));
        assert!(!r.new.is(Path::new("/dev/loop9"), Some((7, 10))));
        assert!(!r.new.is(Path::new("/dev/loop8"), Some((7, 9))));
        std::fs::write(s.file("f", "remove"), "{").unwrap();
        assert_eq!(s.remove("f"), None);
    }
}
