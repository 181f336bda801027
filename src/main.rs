//! `btrfs-lab`: parse → dispatch → exit status.
#![deny(unsafe_code)]

mod cli;

fn main() -> std::process::ExitCode {
    cli::run()
}
