//! A balance as btrfs-lab models it (running or paused, its convert
//! targets, its progress): what the planners, `convert` and the space
//! findings share. [`BalanceInfo::from_status`] reads it from the kernel's
//! report (in `sys`).

use serde::{Deserialize, Serialize};

use crate::model::profile::Profile;

/// A balance that exists (running or paused), as the kernel reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct BalanceInfo {
    /// Running now.
    pub running: bool,
    /// Paused (exists, not running).
    pub paused: bool,
    /// Data convert target.
    pub data_target: Option<Profile>,
    /// Metadata convert target.
    pub metadata_target: Option<Profile>,
    /// Someone asked the kernel to cancel it: it ends after the current chunk.
    pub cancelling: bool,
    /// Chunks expected (0 after a remount of a paused balance).
    pub expected: u64,
    /// Chunks relocated.
    pub completed: u64,
}

impl BalanceInfo {
    /// Its convert targets.
    pub fn targets(&self) -> crate::model::profile::Targets {
        crate::model::profile::Targets {
            data: self.data_target,
            metadata: self.metadata_target,
        }
    }
}
