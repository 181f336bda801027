//! btrfs-lab: administer a btrfs SSD array safely and find out where its
//! throughput goes.
//!
//! The library holds everything but argument parsing and colour: kernel
//! interfaces in [`sys`] (the only place with `unsafe`), pure parsers in
//! [`parse`], plain types in [`model`], and one module per job
//! ([`sandbox`], [`probe`]) whose reports are serde models.
#![deny(unsafe_code)]
#![warn(missing_docs)]

pub mod apps;
pub mod balance;
pub mod bench;
pub mod convert;
pub mod demo;
pub mod device;
pub mod doctor;
pub mod error;
pub mod explain;
pub mod hooks;
pub(crate) mod hw;
pub mod links;
pub mod model;
pub mod nocow;
pub mod operation;
pub mod parse;
pub mod probe;
pub mod readtest;
pub mod reclaim;
pub mod report;
pub mod rescue;
pub mod sandbox;
pub mod schema;
pub mod scrub;
pub mod space;
pub mod sys;
pub mod ui;

pub use error::{Error, ErrorKind, Result};
