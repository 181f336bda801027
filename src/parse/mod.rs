//! Pure parsers: text in, typed values out, no I/O.

pub mod counters;
pub mod fi_df;
pub mod mountinfo;
pub mod proc_maps;
pub mod size;
