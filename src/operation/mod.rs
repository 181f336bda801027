//! What every changing command shares: what it knows of the filesystem it
//! acts on ([`state`]) and the test hooks' pause points ([`hooks`]).

pub mod hooks;
pub mod state;
