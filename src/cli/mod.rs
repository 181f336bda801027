//! The command line: the only place that knows clap and colour. Each
//! subcommand has its own file with its arguments and a thin `run` that
//! calls the library.

mod bench;
mod convert;
mod demo;
mod device;
mod df;
mod doctor;
mod links;
mod nocow;
mod output;
mod probe_dio;
mod read_test;
mod sandbox;
mod show;
mod units;
mod usage;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

use btrfs_lab::error::{Error, exit};
use output::{ColorChoice, Output};

const EXIT_STATUS_HELP: &str = "\
Exit status:
  0    success (probe-dio: O_DIRECT writes are direct)
  1    error: the operation failed or was refused; nothing was changed
  2    bad command line
  3    probe-dio: buffered-fallback; read-test: the methods read different bytes
  4    probe-dio: profile-forced
  5    probe-dio: inconclusive
  130  interrupted (SIGINT or SIGTERM); clean-up was done (convert: the balance is paused)";

/// Administer a btrfs SSD array safely and find out where its throughput goes.
#[derive(Debug, Parser)]
#[command(name = "btrfs-lab", version, after_long_help = EXIT_STATUS_HELP, max_term_width = 100)]
struct Cli {
    /// Print one JSON document on stdout instead of text.
    #[arg(long, global = true)]
    json: bool,

    /// Colour human output: auto (on a terminal, unless NO_COLOR is set), always, never.
    #[arg(long, global = true, value_enum, default_value_t = ColorChoice::Auto, value_name = "WHEN")]
    color: ColorChoice,

    /// Sandbox records directory (sandbox, demo) [default: /var/lib/btrfs-lab/sandboxes].
    #[arg(long, global = true, value_name = "DIR")]
    state_dir: Option<std::path::PathBuf>,

    /// Default parent of sandbox directories (sandbox, demo) [default: /var/tmp/btrfs-lab].
    #[arg(long, global = true, value_name = "DIR")]
    sandbox_root: Option<std::path::PathBuf>,

    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Throwaway filesystems on loop devices (with direct I/O) to test and rehearse on.
    Sandbox(sandbox::SandboxArgs),
    /// Find out whether O_DIRECT writes in a directory really bypass the page cache.
    #[command(after_long_help = probe_dio::AFTER_HELP)]
    ProbeDio(probe_dio::ProbeDioArgs),
    /// Show the O_DIRECT trap on a sandbox btrfs: checksummed vs NOCOW, side by side.
    Demo(demo::DemoArgs),
    /// Space per type and profile, from the kernel or parsed from `btrfs fi df` text.
    Df(df::DfArgs),
    /// Overall, per-profile and per-device allocation, like `btrfs filesystem usage`.
    Usage(usage::UsageArgs),
    /// Filesystems, their features and devices with error counters.
    Show(show::ShowArgs),
    /// Add devices safely (`device add`).
    Device(device::DeviceArgs),
    /// Convert data/metadata profiles with progress, pause and resume.
    Convert(convert::ConvertArgs),
    /// PCIe links of the NVMe drives up to the root port, their ceilings, and an array's.
    #[command(after_long_help = links::AFTER_HELP)]
    Links(links::LinksArgs),
    /// NOCOW directories for VM images and databases: set up, audit, migrate existing files.
    #[command(after_long_help = nocow::AFTER_HELP)]
    Nocow(nocow::NocowArgs),
    /// Which way of reading a big file is fastest here, cold cache, checked by the devices.
    #[command(after_long_help = read_test::AFTER_HELP)]
    ReadTest(read_test::ReadTestArgs),
    /// A CrystalDiskMark-style suite on fio, every figure checked against the devices.
    #[command(after_long_help = bench::AFTER_HELP)]
    Bench(bench::BenchArgs),
    /// What is wrong with each btrfs, worst first (read-only; for monitoring too).
    #[command(after_long_help = doctor::AFTER_HELP)]
    Doctor(doctor::DoctorArgs),
}

/// Parses the command line, runs the command, and turns the outcome into
/// the documented exit status.
pub fn run() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => return ExitCode::from(usage_error(&e)),
    };
    let out = Output::new(cli.json, cli.color);
    let places = (cli.state_dir, cli.sandbox_root);
    let result = match cli.command {
        Command::Sandbox(args) => sandbox::run(args, &out, sandbox::locations(places, &out)),
        Command::ProbeDio(args) => probe_dio::run(args, &out),
        Command::Demo(args) => demo::run(args, &out, sandbox::locations(places, &out)),
        Command::Df(args) => df::run(args, &out),
        Command::Usage(args) => usage::run(args, &out),
        Command::Show(args) => show::run(args, &out),
        Command::Device(args) => device::run(args, &out),
        Command::Convert(args) => convert::run(args, &out),
        Command::Links(args) => links::run(args, &out),
        Command::Nocow(args) => nocow::run(args, &out),
        Command::ReadTest(args) => read_test::run(args, &out),
        Command::Bench(args) => bench::run(args, &out, places),
        Command::Doctor(args) => doctor::run(args, &out),
    };
    let write_error = out.finish(result.as_ref().err());
    match (result, write_error) {
        (Err(e), _) => {
            out.error(&e);
            ExitCode::from(e.exit_code())
        }
        (Ok(_), Some(e)) => {
            out.error(&e);
            ExitCode::from(e.exit_code())
        }
        (Ok(code), None) => ExitCode::from(code),
    }
}

/// clap's errors, printed our way: one line and a hint. `--help` and
/// `--version` are printed as clap renders them.
fn usage_error(e: &clap::Error) -> u8 {
    use clap::error::ErrorKind as K;
    match e.kind() {
        K::DisplayHelp | K::DisplayVersion | K::DisplayHelpOnMissingArgumentOrSubcommand => {
            if let Err(err) = e.print()
                && err.kind() != std::io::ErrorKind::BrokenPipe
            {
                let out = Output::new(false, ColorChoice::Auto);
                out.error(&Error::new(
                    btrfs_lab::error::ErrorKind::Io,
                    format!("cannot write the output: {err}"),
                ));
                return exit::ERROR;
            }
            if e.kind() == K::DisplayHelpOnMissingArgumentOrSubcommand {
                exit::USAGE
            } else {
                exit::OK
            }
        }
        _ => {
            let rendered = e.render().to_string();
            let mut lines = rendered.lines().map(str::trim).filter(|l| !l.is_empty());
            let mut first = lines
                .next()
                .unwrap_or("invalid arguments")
                .trim_start_matches("error: ")
                .to_owned();
            // "the following required arguments were not provided:" + the list.
            if first.ends_with(':')
                && let Some(next) = lines.next()
            {
                first.push(' ');
                first.push_str(next);
            }
            let usage = rendered
                .lines()
                .find_map(|l| l.strip_prefix("Usage: "))
                .map(|u| format!("usage: {u} (see --help)"))
                .unwrap_or_else(|| "see btrfs-lab --help".to_owned());
            let out = Output::new(false, ColorChoice::Auto);
            out.error(&Error::usage(first).with_hint(usage));
            exit::USAGE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn cli_definition_is_consistent() {
        Cli::command().debug_assert();
    }
}
