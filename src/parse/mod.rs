//! Pure parsers: text in, typed values out, no I/O.

pub mod balance_status;
pub mod counters;
pub mod dev_stats;
pub mod dev_usage;
pub mod diskstats;
pub mod fi_df;
pub mod fi_show;
pub(crate) mod fi_usage;
pub mod fio;
pub mod kernel_log;
pub mod memory;
pub mod mountinfo;
pub mod nvme_smart;
pub mod paste;
pub mod pcie;
pub(crate) mod proc_maps;
pub mod replace_status;
pub mod scrub;
pub mod size;
pub mod versions;
pub mod wipefs;
