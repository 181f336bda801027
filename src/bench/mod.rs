//! `bench`: a CrystalDiskMark-style suite on fio whose every figure is
//! checked against what the kernel saw.
//!
//! fio does the I/O (btrfs-lab writes its job files and reads its JSON);
//! around each run btrfs-lab reads what fio cannot know: the member
//! devices' sector counters, the test file's page-cache residency, the
//! page cache dirtied by writes, the file's extents (compression, never
//! written regions), the array's PCIe ceiling and the drives' thermal
//! counters. A figure that fails a check is flagged with the reason and
//! is not given as a result.

//!
//! The suite is [`suite`]; [`kit`] is what every mode shares (the held
//! target, the work directory, output files, signals).

pub mod analysis;
pub mod buffers;
pub mod cliff;
pub mod compare;
pub mod history;
pub mod html;
pub mod jobs;
pub mod kit;
pub mod members;
pub mod metadata;
pub mod metrics;
pub mod plan;
pub mod profile;
pub mod profiles;
pub mod report;
pub(crate) mod sensors;
pub mod suite;
pub mod sustained;
#[cfg(test)]
pub(crate) mod testdata;

pub use kit::{
    OutputFile, Progress, TEST_FILE, Target, WORK_DIR_PREFIX, filesystem_uuid, open_target,
};
pub use report::BenchReport;
pub use suite::{
    BenchOptions, Buffers, DEFAULT_DURATION, DEFAULT_RUNS, SuiteEvent, buffers, measure, prepare,
    run,
};
