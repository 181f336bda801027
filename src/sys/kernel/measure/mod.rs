//! The system calls of the measuring jobs (bench, read-test, probe-dio,
//! nocow), each behind a small safe function: the jobs name no syscall
//! crate themselves.

pub(crate) mod atfile;
pub(crate) mod files;
pub(crate) mod ids;
