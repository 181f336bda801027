//! The command line: the only place that knows clap and colour. Each
//! subcommand has its own file with its arguments and a thin `run` that
//! calls the library.

mod apps;
mod balance;
mod bench;
mod capacity;
mod completions;
mod convert;
mod decl;
mod demo;
mod device;
mod df;
mod doctor;
mod explain;
mod links;
mod man;
mod nocow;
mod output;
mod page;
mod probe_dio;
mod read_test;
mod reclaim;
mod rescue;
mod sandbox;
mod scrub;
mod show;
mod units;
mod usage;

use std::process::ExitCode;

use clap::{Arg, ArgAction, CommandFactory, FromArgMatches, Parser, Subcommand};

use btrfs_lab::error::{Error, exit};
use output::{ColorChoice, Output};

/// Administer a btrfs SSD array safely and find out where its throughput goes.
#[derive(Debug, Parser)]
#[command(
    name = "btrfs-lab",
    version,
    max_term_width = 100,
    next_help_heading = "Global options (after any subcommand too)"
)]
struct Cli {
    /// JSON on stdout instead of text (docs/json.md), even with --quiet.
    #[arg(long, global = true)]
    json: bool,

    /// Only errors: no text result, notes or progress; the exit status stays.
    #[arg(short = 'q', long, global = true)]
    quiet: bool,

    /// Colour: auto (on a terminal, unless NO_COLOR is set), always, never.
    #[arg(
        long,
        global = true,
        value_enum,
        default_value_t = ColorChoice::Auto,
        value_name = "WHEN",
        hide_possible_values = true,
        hide_default_value = true
    )]
    color: ColorChoice,

    /// State directory [default: /var/lib/btrfs-lab]: the bench history in DIR/bench.sqlite, scrub state in DIR/scrub, what balance and reclaim learnt in DIR/balance and DIR/reclaim, settings to put back in DIR/settings; sandbox records (sandbox, demo) in DIR itself [default: /var/lib/btrfs-lab/sandboxes].
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
    /// Throwaway btrfs on loop devices, for tests and rehearsals.
    Sandbox(sandbox::SandboxArgs),
    /// Find out whether O_DIRECT writes in a directory bypass the cache.
    #[command(after_long_help = probe_dio::AFTER_HELP)]
    ProbeDio(probe_dio::ProbeDioArgs),
    /// Show the O_DIRECT trap on a sandbox: checksummed vs NOCOW.
    Demo(demo::DemoArgs),
    /// Space per type and profile, from the kernel or `btrfs fi df` text.
    Df(df::DfArgs),
    /// Allocation overall, per profile and per device, like fi usage.
    Usage(usage::UsageArgs),
    /// Filesystems, their features and devices with error counters.
    Show(show::ShowArgs),
    /// Usable space per profile for devices you have or plan to buy.
    Capacity(capacity::CapacityArgs),
    /// Add, replace and remove devices safely, plan first.
    Device(device::DeviceArgs),
    /// Convert data/metadata profiles with progress, pause and resume.
    Convert(convert::ConvertArgs),
    /// Spread existing data over every device (after an add), plan first.
    #[command(after_long_help = balance::AFTER_HELP)]
    Balance(balance::BalanceArgs),
    /// Relocate little-used data chunks to end ENOSPC, plan first.
    #[command(after_long_help = reclaim::AFTER_HELP)]
    Reclaim(reclaim::ReclaimArgs),
    /// Verify every block's checksum, repair from copies; resumable.
    #[command(after_long_help = scrub::AFTER_HELP)]
    Scrub(scrub::ScrubArgs),
    /// PCIe links of NVMe drives, and the drives' and array's ceilings.
    #[command(after_long_help = links::AFTER_HELP)]
    Links(links::LinksArgs),
    /// NOCOW directories for VMs and databases: set up, audit, migrate.
    #[command(after_long_help = nocow::AFTER_HELP)]
    Nocow(nocow::NocowArgs),
    /// O_DIRECT users (VMs, databases): what btrfs does with them.
    Apps(apps::AppsArgs),
    /// Which way of reading a big file is fastest here (cold cache).
    #[command(after_long_help = read_test::AFTER_HELP)]
    ReadTest(read_test::ReadTestArgs),
    /// A CrystalDiskMark-style suite on fio, checked against the devices.
    #[command(after_long_help = bench::AFTER_HELP)]
    Bench(bench::BenchArgs),
    /// After a lost drive: find the intact files, copy them out verified.
    #[command(after_long_help = rescue::AFTER_HELP)]
    Rescue(rescue::RescueArgs),
    /// What is wrong with each btrfs, worst first (read-only).
    #[command(after_long_help = doctor::AFTER_HELP)]
    Doctor(doctor::DoctorArgs),
    /// What pasted btrfs outputs and kernel lines mean together.
    Explain(explain::ExplainArgs),
    /// Shell completion script: bash, zsh, fish, elvish or powershell.
    Completions(completions::CompletionsArgs),
    /// Print a manual page, or write one per subcommand into a directory.
    Man(man::ManArgs),
}

/// Parses the command line, runs the command, and turns the outcome into
/// the documented exit status.
pub fn run() -> ExitCode {
    // Text fills the terminal (at most 100 columns), COLUMNS when set, else 80.
    let terminal = console::Term::stdout()
        .size_checked()
        .map(|(_, columns)| usize::from(columns));
    let columns = std::env::var("COLUMNS").ok();
    btrfs_lab::report::text::set_width(btrfs_lab::report::text::width_for(
        columns.as_deref(),
        terminal,
    ));
    let cli = match parse() {
        Ok(cli) => cli,
        Err(status) => return status,
    };
    let out = Output::new(cli.json, cli.color).with_quiet(cli.quiet);
    let places = (cli.state_dir, cli.sandbox_root);
    // Kernel settings a killed run left changed are put back first.
    for line in btrfs_lab::sys::kernel::settings::sweep(places.0.as_deref()) {
        out.note(&line);
    }
    let result = dispatch(cli.command, &out, places);
    exit_status(&out, result)
}

/// The command line, or the status of a usage error (said on stderr).
fn parse() -> std::result::Result<Cli, ExitCode> {
    let argv: Vec<std::ffi::OsString> = std::env::args_os().collect();
    let dash_h = argv.iter().any(|a| a == "-h");
    let mut definition = if may_show_top_help(&argv) {
        command()
    } else {
        definition()
    };
    let sub = subcommand_of(&definition, &argv);
    let parsed = definition
        .try_get_matches_from_mut(argv)
        .and_then(|m| Cli::from_arg_matches(&m));
    // The definition is a tree of a few thousand allocations; the process
    // ends after this one command, so it is not freed piece by piece.
    std::mem::forget(definition);
    parsed.map_err(|e| ExitCode::from(usage_error(&e, dash_h, sub.as_deref())))
}

/// The subcommand `argv` names: its first word that is neither an option
/// nor the value of a global option (`--state-dir DIR`).
fn subcommand_of(definition: &clap::Command, argv: &[std::ffi::OsString]) -> Option<String> {
    let takes_value = |word: &str| {
        definition.get_arguments().any(|a| {
            a.get_action().takes_values()
                && (a.get_long().is_some_and(|l| word == format!("--{l}"))
                    || a.get_short().is_some_and(|c| word == format!("-{c}")))
        })
    };
    let mut words = argv.iter().skip(1);
    while let Some(w) = words.next() {
        let w = w.to_str()?;
        if w == "--" {
            return None;
        }
        if w.starts_with('-') {
            if takes_value(w) {
                words.next();
            }
            continue;
        }
        return Some(w.to_owned());
    }
    None
}

/// Runs the subcommand.
fn dispatch(
    command: Command,
    out: &Output,
    places: (Option<std::path::PathBuf>, Option<std::path::PathBuf>),
) -> btrfs_lab::error::Result<u8> {
    match command {
        Command::Sandbox(args) => sandbox::run(args, out, sandbox::locations(places, out)),
        Command::ProbeDio(args) => probe_dio::run(args, out),
        Command::Demo(args) => demo::run(args, out, sandbox::locations(places, out)),
        Command::Df(args) => df::run(args, out),
        Command::Usage(args) => usage::run(args, out, places.0.clone()),
        Command::Show(args) => show::run(args, out, places.0.clone()),
        Command::Capacity(args) => capacity::run(args, out),
        Command::Device(args) => device::run(args, out, places.0.clone()),
        Command::Convert(args) => convert::run(args, out),
        Command::Reclaim(args) => reclaim::run(args, out, places.0.clone()),
        Command::Balance(args) => balance::run(args, out, places.0.clone()),
        Command::Scrub(args) => scrub::run(args, out, places.0.clone()),
        Command::Links(args) => links::run(args, out),
        Command::Nocow(args) => nocow::run(args, out),
        Command::Apps(args) => apps::run(args, out),
        Command::ReadTest(args) => read_test::run(args, out),
        Command::Bench(args) => bench::run(args, out, places),
        Command::Doctor(args) => doctor::run(args, out, places.0.clone()),
        Command::Explain(args) => explain::run(args, out),
        Command::Rescue(args) => rescue::run(args, out, places.0.clone()),
        Command::Completions(args) => completions::run(args, out),
        Command::Man(args) => man::run(args, out),
    }
}

/// The process's exit status: the command's, or its error's (said on
/// stderr), or the output's failure when stdout could not be written.
fn exit_status(out: &Output, result: btrfs_lab::error::Result<u8>) -> ExitCode {
    let write_error = out.finish(result.as_ref().err());
    match (result, write_error) {
        (Err(e), _) => {
            out.error(&e);
            ExitCode::from(e.exit_code())
        }
        (Ok(_), Some(failed)) => {
            out.error(&failed.error);
            ExitCode::from(failed.status.code)
        }
        (Ok(code), None) => ExitCode::from(code),
    }
}

/// The one line that ends every subcommand's help, instead of repeating
/// the global options there.
const GLOBAL_OPTIONS_POINTER: &str =
    "See btrfs-lab --help for the global options (--json, --quiet, --color, ...).";

/// The command-line definition as users see it: `Cli` with `--help` as the
/// help flag everywhere and `-h` too where it is free (`-h` means
/// --human-readable on the commands that print sizes, as in btrfs-progs),
/// and the global options shown once,
/// in the top-level help. Man pages and completions should be generated
/// from this, not from `Cli::command()`.
///
/// Each subcommand is finished ([`below_top`]) only when clap builds it:
/// when argv names it, or for its help, man page or completions
/// (`Command::build` builds every one). A run of `df` does not pay for the
/// other seventeen; what a built subcommand looks like is the same.
pub fn command() -> clap::Command {
    definition().after_long_help(btrfs_lab::model::exit::help_table())
}

/// Whether this command line may print the top-level `--help` (`--help`,
/// `-h` or `help` anywhere: more often than needed, never less), the only text
/// that shows the exit-status table.
fn may_show_top_help(argv: &[std::ffi::OsString]) -> bool {
    argv.iter()
        .skip(1)
        .any(|a| a == "--help" || a == "-h" || a == "help")
}

/// [`command`] without the exit-status table at the end of the top-level
/// `--help` (built from the exit registry on every call).
fn definition() -> clap::Command {
    with_help_flag(Cli::command())
        .term_width(btrfs_lab::report::text::width())
        .disable_version_flag(true)
        .arg(
            Arg::new("version")
                .short('V')
                .long("version")
                .action(ArgAction::Version)
                .help("Print the version.")
                .help_heading(None),
        )
        .mut_subcommands(|sc| sc.defer(below_top_when_built))
}

/// `--help` instead of clap's `-h/--help`, and `-h` for the same help
/// where it is free: on the commands that print sizes `-h` is
/// `--human-readable`, as in btrfs-progs, and help is `--help` alone.
fn with_help_flag(cmd: clap::Command) -> clap::Command {
    let h_free = !cmd.get_arguments().any(|a| a.get_short() == Some('h'));
    let help = Arg::new("help")
        .long("help")
        .action(ArgAction::HelpLong)
        .help("Print help.")
        .help_heading(None);
    cmd.disable_help_flag(true)
        .arg(if h_free { help.short('h') } else { help })
}

/// [`below_top`] for a subcommand of the top level, run by clap when it
/// builds that subcommand. By then clap has copied the global options into
/// it; they are hidden and moved behind the help flag, where [`below_top`]
/// puts the copies it adds one level down.
fn below_top_when_built(cmd: clap::Command) -> clap::Command {
    let globals: Vec<Arg> = cmd
        .get_arguments()
        .filter(|a| a.is_global_set())
        .cloned()
        .collect();
    let mut cmd = with_help_flag(cmd);
    for g in &globals {
        cmd = cmd.mut_arg(g.get_id(), |a| a.hide(true));
    }
    finish_below_top(cmd, &globals)
}

/// A subcommand (at any depth): the help flag, hidden copies of the global
/// options (clap does not propagate a global option to a command that
/// already has one with the same id, so these stay hidden and still parse),
/// and the pointer to the top-level help at the end.
fn below_top(cmd: clap::Command, globals: &[Arg]) -> clap::Command {
    let mut cmd = with_help_flag(cmd);
    for g in globals {
        cmd = cmd.arg(g.clone().hide(true));
    }
    finish_below_top(cmd, globals)
}

/// The rest of [`below_top`]: the unit options folded into one table, the
/// pointer to the top-level help, and the subcommands one level down.
fn finish_below_top(mut cmd: clap::Command, globals: &[Arg]) -> clap::Command {
    // The unit options (the same nine on every command that prints sizes)
    // as one short table instead of thirty lines in each --help; they still
    // parse and complete.
    let mut pointer = GLOBAL_OPTIONS_POINTER.to_owned();
    if cmd.get_arguments().any(|a| a.get_id() == "tbytes") {
        for id in units::UNIT_IDS {
            cmd = cmd.mut_arg(id, |a| a.hide_long_help(true).hide_short_help(true));
        }
        // Options declared after the flattened units (--sysroot) would go
        // under its heading: they are ordinary options.
        let strays: Vec<clap::Id> = cmd
            .get_arguments()
            .filter(|a| {
                a.get_help_heading() == Some(units::UNITS_HEADING)
                    && !units::UNIT_IDS.contains(&a.get_id().as_str())
            })
            .map(|a| a.get_id().clone())
            .collect();
        for id in strays {
            cmd = cmd.mut_arg(id, |a| a.help_heading(None));
        }
        pointer = format!("{}\n\n{pointer}", units::UNITS_HELP);
    }
    let short = match cmd.get_after_help() {
        Some(t) => format!("{t}\n\n{pointer}"),
        None => pointer.clone(),
    };
    let long = match cmd.get_after_long_help() {
        Some(t) => format!("{t}\n\n{pointer}"),
        None => short.clone(),
    };
    cmd.after_help(short)
        .after_long_help(long)
        .mut_subcommands(|sc| below_top(sc, globals))
}

/// clap's errors, printed our way: one line and a hint. `--help` and
/// `--version` are printed as clap renders them. `dash_h`: the line has
/// `-h`, which is --human-readable where the command prints sizes (help
/// elsewhere): a line that lacks an argument says so. The status of an
/// error is [`page::usage_status`] of the subcommand `sub` argv named.
fn usage_error(e: &clap::Error, dash_h: bool, sub: Option<&str>) -> u8 {
    use clap::error::{ContextKind, ContextValue, ErrorKind as K};
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
            // What clap puts on further lines, kept: the accepted values and
            // its "did you mean" for a near miss.
            if e.kind() == K::InvalidValue
                && let Some(ContextValue::Strings(valid)) = e.get(ContextKind::ValidValue)
                && !valid.is_empty()
            {
                first.push_str(&format!(" (one of: {})", valid.join(", ")));
            }
            let suggested = [
                ContextKind::SuggestedValue,
                ContextKind::SuggestedSubcommand,
                ContextKind::SuggestedArg,
            ]
            .into_iter()
            .find_map(|k| match e.get(k) {
                Some(ContextValue::String(s)) => Some(s.clone()),
                Some(ContextValue::Strings(v)) if !v.is_empty() => Some(v.join("' or '")),
                _ => None,
            });
            let usage = rendered
                .lines()
                .find_map(|l| l.strip_prefix("Usage: "))
                .map(|u| format!("usage: {u} (see --help)"))
                .unwrap_or_else(|| "see btrfs-lab --help".to_owned());
            let usage = match suggested {
                Some(s) => format!("did you mean '{s}'? {usage}"),
                None => usage,
            };
            let usage = if dash_h && e.kind() == K::MissingRequiredArgument {
                format!("-h is --human-readable here, as in btrfs-progs; help is --help. {usage}")
            } else {
                usage
            };
            let out = Output::new(false, ColorChoice::Auto);
            out.error(&Error::usage(first).with_hint(usage));
            page::usage_status(sub.as_slice()).code
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cli_definition_is_consistent() {
        command().debug_assert();
    }

    /// clap re-wraps any line wider than the terminal, which breaks the
    /// hand-made tables of the after-help texts: every line fits 80 columns.
    #[test]
    fn hand_wrapped_help_fits_80_columns() {
        fn walk(c: &clap::Command, path: String, bad: &mut Vec<String>) {
            for text in [c.get_after_help(), c.get_after_long_help()]
                .into_iter()
                .flatten()
            {
                for line in text.to_string().lines() {
                    if line.chars().count() > 80 {
                        bad.push(format!("{path}: {line}"));
                    }
                }
            }
            for s in c.get_subcommands() {
                walk(s, format!("{path} {}", s.get_name()), bad);
            }
        }
        let mut bad = Vec::new();
        // Built: the subcommands' texts are finished when clap builds them.
        let mut cmd = command();
        cmd.build();
        walk(&cmd, "btrfs-lab".into(), &mut bad);
        assert!(bad.is_empty(), "lines wider than 80:\n{}", bad.join("\n"));
    }

    /// The exit-status table is left out only where the top-level
    /// `--help` cannot be printed; where it is, the definition is
    /// [`command`]'s.
    #[test]
    fn top_help_keeps_its_exit_table() {
        let argv = |a: &[&str]| -> Vec<std::ffi::OsString> {
            std::iter::once("btrfs-lab")
                .chain(a.iter().copied())
                .map(Into::into)
                .collect()
        };
        for shown in [
            &["--help"][..],
            &["help"],
            &["--json", "--help"],
            &["help", "df"],
            &["df", "--help"],
        ] {
            assert!(may_show_top_help(&argv(shown)), "{shown:?}");
        }
        for not in [&["--version"][..], &["df", "--json", "/mnt"], &[]] {
            assert!(!may_show_top_help(&argv(not)), "{not:?}");
        }
        let help = command().render_long_help().to_string();
        assert!(help.contains(&btrfs_lab::model::exit::help_table()));
        let lean = definition().render_long_help().to_string();
        assert!(!lean.contains("Exit status:"));
    }

    fn parse(args: &[&str]) -> String {
        let m = command()
            .try_get_matches_from(std::iter::once("btrfs-lab").chain(args.iter().copied()))
            .unwrap_or_else(|e| panic!("{args:?}: {e}"));
        format!("{:?}", Cli::from_arg_matches(&m).unwrap())
    }

    /// Every renamed flag: the old spelling still parses to exactly what the
    /// new one does, and it is hidden (an alias no help shows).
    #[test]
    fn old_flag_spellings_still_work_hidden() {
        let renames: &[(&[&str], &str, &str, &[&str])] = &[
            (&["sandbox", "up"], "--size", "--device-size", &["512M"]),
            (&["probe-dio"], "--size", "--file-size", &["32M", "/tmp"]),
            (&["demo"], "--size", "--file-size", &["32M"]),
            (&["bench"], "--size", "--file-size", &["64M", "/tmp"]),
            (&["bench"], "--runs", "--rounds", &["2", "/tmp"]),
            (&["bench"], "--metadata", "--small-files", &["/tmp"]),
            (
                &["device", "add"],
                "--force",
                "--overwrite",
                &["/mnt", "/dev/x"],
            ),
            (
                &["convert"],
                "--force",
                "--allow-weaker-metadata",
                &["/mnt"],
            ),
            (
                &["nocow"],
                "--force",
                "--include-open",
                &["--migrate", "/tmp/d"],
            ),
        ];
        for (sub, old, new, rest) in renames {
            let with = |flag: &'static str| {
                let mut v: Vec<&'static str> = sub.to_vec();
                v.push(flag);
                v.extend_from_slice(rest);
                v
            };
            let (a, b) = (parse(&with(old)), parse(&with(new)));
            assert_eq!(a, b, "{sub:?} {old} must mean {new}");
            // And the flag was really taken: without it the parse differs.
            let mut without: Vec<&str> = sub.to_vec();
            without.extend_from_slice(rest);
            let bare = command()
                .try_get_matches_from(std::iter::once("btrfs-lab").chain(without.iter().copied()))
                .map(|m| format!("{:?}", Cli::from_arg_matches(&m).unwrap()));
            assert_ne!(
                bare.ok().as_deref(),
                Some(a.as_str()),
                "{sub:?} {old} changed nothing"
            );
            let mut cmd = command();
            cmd.build();
            let mut c = &mut cmd;
            for name in *sub {
                c = c.find_subcommand_mut(name).unwrap();
            }
            let arg = c
                .get_arguments()
                .find(|a| a.get_long() == Some(&new[2..]))
                .unwrap_or_else(|| panic!("{sub:?} has no {new}"));
            let all = arg.get_all_aliases().unwrap_or_default();
            assert!(all.contains(&&old[2..]), "{sub:?} {new} lacks alias {old}");
            assert!(
                arg.get_visible_aliases().unwrap_or_default().is_empty(),
                "{sub:?} {old} must be hidden"
            );
            let help = c.render_long_help().to_string();
            assert!(
                !help
                    .split_whitespace()
                    .any(|w| w.trim_end_matches(',') == *old),
                "{sub:?} help shows {old}"
            );
        }
    }
}
