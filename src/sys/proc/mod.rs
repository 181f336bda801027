//! What the kernel tells through /proc, /sys and tracefs: the mount table
//! (one reader: [`mountinfo`]), I/O counters (vmstat, bdi), diskstats (one
//! reader: `diskstats`), processes and their open files, cgroups, private
//! trace instances.

pub mod cgroup;
pub mod counters;
pub(crate) mod diskstats;
pub(crate) mod fdinfo;
pub mod mountinfo;
pub mod pidfd;
pub(crate) mod procs;
pub(crate) mod task;
pub(crate) mod tracefs;
