//! `scrub MOUNT`: read every block of every device, verify its checksum and
//! repair from another copy where the profile has one.
//!
//! The kernel scrubs one device per `BTRFS_IOC_SCRUB` (blocking), so a run
//! has one thread per device (as btrfs-progs) and the calling thread polls
//! `SCRUB_PROGRESS` for progress and waits for signals. The first SIGINT,
//! SIGTERM or SIGHUP cancels the scrub (the kernel keeps `last_physical`
//! per device); the process returns only once every scrub ioctl did.
//! What was done is saved (atomically) under the state directory, and a
//! later `scrub MOUNT --resume` starts each device at its `last_physical`,
//! as `btrfs scrub resume` does. btrfs-progs' record of the scrub is
//! written too ([`progs`]): `btrfs scrub status` shows it.

pub mod all;
mod control;
mod exec;
mod log;
mod metrics;
pub mod operation;
mod plan;
pub mod progs;
mod report;
mod state;
#[cfg(test)]
mod tests;

pub use control::{cancel, running, status};
pub use exec::execute;
pub use metrics::metrics;
pub use plan::{DeviceInput, Request, plan, plan_from};
pub use report::{
    DamagedFile, DeviceScrub, Outcome, PlannedDevice, SavedScrub, ScrubCancel, ScrubPlan,
    ScrubRecord, ScrubReport, ScrubStatus, SpeedLimit, Totals,
};
pub use state::{STATE_DIR, StateStore};
