//! The rate a balance ran at on a filesystem, kept in the state directory
//! (`STATE_DIR/balance/FSID.json`): the next plan's time estimate is
//! measured on this array, not assumed.

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::error::{Error, ErrorKind, Result};
use crate::sys::fs::state::StateRoom;

/// Bytes a run must move for its rate to be kept (a few chunks: a rate
/// from one small chunk says more about the commit than the copy).
pub const MIN_BYTES: u64 = 256 << 20;

/// The last balance measured on a filesystem.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Measured {
    /// Filesystem UUID.
    pub fsid: String,
    /// Logical bytes it moved.
    pub bytes: u64,
    /// Seconds it took.
    pub seconds: f64,
    /// When (RFC 3339).
    pub when: String,
}

impl Measured {
    /// Bytes per second.
    pub fn rate(&self) -> f64 {
        self.bytes as f64 / self.seconds.max(f64::MIN_POSITIVE)
    }
}

/// A plan's time: the bytes to move at the rate measured here.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Estimate {
    /// Seconds, at `bytes_per_sec`.
    pub seconds: f64,
    /// The rate the last balance measured on this filesystem ran at.
    pub bytes_per_sec: f64,
    /// When it was measured (RFC 3339).
    pub measured: String,
}

impl Estimate {
    /// `bytes` at the rate of `m`.
    pub fn of(bytes: u64, m: &Measured) -> Self {
        let rate = m.rate();
        Estimate {
            seconds: bytes as f64 / rate,
            bytes_per_sec: rate,
            measured: m.when.clone(),
        }
    }
}

/// `state_dir`/balance.
pub struct RateStore {
    room: StateRoom,
}

impl RateStore {
    /// The store under `state_dir`.
    pub fn new(state_dir: &Path) -> Self {
        RateStore {
            room: StateRoom::new(state_dir, "balance"),
        }
    }

    fn name(fsid: &str) -> String {
        format!("{fsid}.json")
    }

    /// The last rate measured on `fsid` (`None`: never; a file that is
    /// not one of `fsid` is an error the caller warns of).
    pub fn load(&self, fsid: &str) -> Result<Option<Measured>> {
        let name = Self::name(fsid);
        match self.room.load::<Measured>(&name)? {
            Some(m) if m.fsid == fsid && m.seconds > 0.0 && m.bytes > 0 => Ok(Some(m)),
            Some(_) => Err(Error::new(
                ErrorKind::Parse,
                format!(
                    "{} is not a balance rate of {fsid}",
                    self.room.file(&name).display()
                ),
            )
            .with_hint("remove it; the next balance measures the rate again")),
            None => Ok(None),
        }
    }

    /// Keeps the rate of a run that moved `bytes` in `seconds` (runs that
    /// moved less than [`MIN_BYTES`] are not kept): `Ok(false)`.
    pub fn keep(&self, fsid: &str, bytes: u64, seconds: f64) -> Result<bool> {
        if bytes < MIN_BYTES || seconds <= 0.0 {
            return Ok(false);
        }
        let m = Measured {
            fsid: fsid.to_owned(),
            bytes,
            seconds,
            when: crate::report::envelope::rfc3339(std::time::SystemTime::now()),
        };
        self.room.save(&Self::name(fsid), &m).map(|()| true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kept_rate_estimates_the_next_plan_and_small_runs_are_not_kept() {
        let t = tempfile::tempdir().unwrap();
        let s = RateStore::new(t.path());
        assert_eq!(s.load("abc").unwrap(), None);
        assert!(!s.keep("abc", 1 << 20, 1.0).unwrap());
        assert!(s.keep("abc", 1 << 30, 4.0).unwrap());
        let m = s.load("abc").unwrap().unwrap();
        assert_eq!(m.rate(), (1u64 << 28) as f64);
        let e = Estimate::of(1 << 29, &m);
        assert_eq!(e.seconds, 2.0);
        // Another filesystem's file under this name is refused.
        std::fs::copy(
            t.path().join("balance/abc.json"),
            t.path().join("balance/def.json"),
        )
        .unwrap();
        assert_eq!(s.load("def").unwrap_err().kind(), ErrorKind::Parse);
    }
}
