//! btrfs-lab's state directory (`/var/lib/btrfs-lab`, or `--state-dir
//! DIR`): one room per job (`scrub/`, `reclaim/`, `device/`, `settings/`,
//! `rescue/`), each a directory of small JSON files. They are read by the
//! safe reader ([`super::input`]: no link another user owns, regular files
//! only, bounded) and replaced atomically by the safe writer
//! ([`super::outfile`]: only regular files, in directories root holds).

use std::path::{Path, PathBuf};

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::error::{Error, ErrorKind, Result};

/// The state directory when `--state-dir` is not given.
pub const STATE_DIR: &str = "/var/lib/btrfs-lab";

/// The state directory a command uses: `--state-dir` when given, else
/// the sysroot's `/var/lib/btrfs-lab`.
pub fn state_dir_of(root: &super::root::SysRoot, given: Option<PathBuf>) -> PathBuf {
    given.unwrap_or_else(|| root.prefix().join(STATE_DIR.trim_start_matches('/')))
}

/// The largest state file read (they are a few KiB).
const CAP: u64 = 1 << 20;

/// One job's room in the state directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StateRoom {
    dir: PathBuf,
}

impl StateRoom {
    /// `state_dir`/`room`.
    pub fn new(state_dir: &Path, room: &str) -> Self {
        StateRoom {
            dir: state_dir.join(room),
        }
    }

    /// The room's directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Where `name` is.
    pub fn file(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    /// The text of `name`; `None` when there is no such file.
    pub fn read(&self, name: &str) -> Result<Option<String>> {
        match super::input::read_user_text(&self.file(name), CAP) {
            Ok(t) => Ok(Some(t)),
            Err(e) if e.kind() == ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// `name` parsed as a `T`; `None` when there is no such file, an error
    /// naming the file when it is not one.
    pub fn load<T: DeserializeOwned>(&self, name: &str) -> Result<Option<T>> {
        let Some(text) = self.read(name)? else {
            return Ok(None);
        };
        serde_json::from_str(&text).map(Some).map_err(|e| {
            Error::new(
                ErrorKind::Parse,
                format!(
                    "{} is not a state file of btrfs-lab: {e}",
                    self.file(name).display()
                ),
            )
            .with_hint("remove it, or give another --state-dir")
        })
    }

    /// Replaces `name` with `value` (pretty JSON) atomically, making the
    /// room's directory when it is not there.
    pub fn save<T: Serialize>(&self, name: &str, value: &T) -> Result<()> {
        let text = serde_json::to_string_pretty(value)
            .map_err(|e| Error::new(ErrorKind::Io, format!("cannot serialize: {e}")))?;
        let dir = super::outfile::OutputDir::create(&self.dir, 0o755)?;
        dir.write(name, text.as_bytes(), 0o644).map(|_| ())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_room_keeps_json_files_and_names_one_that_is_not_its_own() {
        let t = tempfile::tempdir().unwrap();
        let room = StateRoom::new(t.path(), "job");
        assert_eq!(room.load::<Vec<u32>>("a.json").unwrap(), None);
        room.save("a.json", &vec![1u32, 2]).unwrap();
        assert_eq!(room.load::<Vec<u32>>("a.json").unwrap(), Some(vec![1, 2]));
        std::fs::write(room.file("b.json"), "not json").unwrap();
        let e = room.load::<Vec<u32>>("b.json").unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Parse);
        assert!(e.message().contains("b.json"), "{e}");
    }
}
