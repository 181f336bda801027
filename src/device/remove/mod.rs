//! `device remove MOUNT DEV...`: the plan (pure: the profiles' minimum
//! device counts, whether the data fits on the devices that stay, and the
//! order that moves the fewest bytes twice), carrying it out one device at
//! a time through `btrfs device remove`, progress from the bytes left on
//! the device, and on a signal a stop that leaves the device a member (the
//! kernel cancels the relocation when the remove's process gets a fatal
//! signal) so that a re-run continues.

mod exec;
pub mod operation;
mod plan;
mod report;

pub use exec::execute_remove;
pub use plan::*;
pub use report::*;
