//! `balance MOUNT`: spreads the chunks written before a device came onto
//! every device, with the smallest balance that does it (see [`plan`]).

pub mod plan;

#[cfg(test)]
mod tests;
