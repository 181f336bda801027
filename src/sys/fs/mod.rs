//! Touching the filesystem as root: held directories (beneath), output files,
//! which filesystem a path is on, mounts, copies, the --sysroot prefix.

pub(crate) mod beneath;
pub(crate) mod filecopy;
pub mod filesystem;
pub mod input;
pub(crate) mod migrate;
pub mod mounts;
pub mod nonce;
pub mod outfile;
pub(crate) mod rescue;
pub mod root;
pub(crate) mod scratch;
pub mod state;
pub mod target;
