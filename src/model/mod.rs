//! Plain domain types shared by planners, executors and reports.

pub mod envelope;
pub mod exit;
pub mod finding;
pub mod kernel;
pub mod profile;
pub mod rate;
pub mod space;
pub mod text;
pub mod units;
pub mod usage;
