//! Pure parsers: text in, typed values out, no I/O.

pub mod counters;
pub mod diskstats;
pub mod fi_df;
pub(crate) mod fi_usage;
pub mod fio;
pub mod memory;
pub mod mountinfo;
pub mod nvme_smart;
pub mod pcie;
pub(crate) mod proc_maps;
pub mod size;
pub mod wipefs;
