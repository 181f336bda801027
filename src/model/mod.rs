//! Plain domain types shared by planners, executors and reports.

pub mod profile;
