//! `balance MOUNT`: spreads the chunks written before a device came onto
//! every device, with the smallest balance that does it (see [`plan`]).

pub mod operation;
pub mod plan;
pub mod rate;
pub mod report;
pub mod run;

#[cfg(test)]
mod tests;
