//! Plain domain types shared by planners, executors and reports, and the one
//! btrfs model: profiles and their geometry ([`profile`]), the chunk
//! allocator and its chunk-size rule ([`alloc`]), kernel versions the rules
//! depend on ([`kernel`]).

pub mod alloc;
pub mod balance;
pub mod exit;
pub mod finding;
pub mod kernel;
pub mod member;
pub mod profile;
pub mod reclaim;
pub mod relocate;
pub mod space;
pub mod stripes;
pub mod usage;
