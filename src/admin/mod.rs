//! Administration: growing the array (`device add`) and converting profiles
//! (`convert`). Each follows plan → show → confirm → execute → verify; the
//! plans are pure functions of what was read, the executors are thin.

pub mod add;
pub mod checks;
pub mod convert;
pub mod hooks;
pub mod reclaim;
pub mod redundancy;
/// `device remove`.
pub mod remove;
pub mod replace;
pub mod report;
pub mod scrub;
pub mod started;
pub mod state;
