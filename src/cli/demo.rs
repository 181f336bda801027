//! `btrfs-lab demo`: a sandbox btrfs, `probe-dio` on a checksummed and on a
//! NOCOW directory of it, the two verdicts side by side, the sandbox removed.

use btrfs_lab::demo::{self, DemoOptions, DemoReport};
use btrfs_lab::probe::report::ProbeReport;
use btrfs_lab::probe::verdict::Verdict;
use clap::Args;

use btrfs_lab::error::{Result, exit};
use btrfs_lab::parse::size::format_rate;
use btrfs_lab::probe;
use btrfs_lab::sandbox::Locations;
use btrfs_lab::sys::kernel::signals;

use super::output::{Output, wrap};
use super::units::{UnitArgs, size, size_arg};

#[derive(Debug, Args)]
pub struct DemoArgs {
    /// Size of each test file [default: probe-dio's, 4M when the per-file
    /// tracepoints are used (root, tracefs), else 64M].
    #[arg(
        long = "file-size",
        alias = "size",
        value_parser = size_arg,
        value_name = "SIZE"
    )]
    file_size: Option<u64>,
    /// Rounds (the medians decide).
    #[arg(long, default_value_t = probe::DEFAULT_ROUNDS, value_name = "N")]
    rounds: u32,
    #[command(flatten)]
    units: UnitArgs,
}

pub fn run(args: DemoArgs, out: &Output, places: Locations) -> Result<u8> {
    signals::install()?;
    args.units.select();
    let opts = DemoOptions {
        file_size: args.file_size,
        rounds: args.rounds,
    };
    let report = demo::run(&opts, &places, out)?;
    out.report(&report, |r| render(r, out));
    Ok(exit::OK)
}

fn render(r: &DemoReport, out: &Output) -> String {
    let p = out.paint;
    let names = |v: &[btrfs_lab::model::profile::Profile]| {
        v.iter().map(|p| p.name()).collect::<Vec<_>>().join("+")
    };
    let mut t = format!(
        "\n{} O_DIRECT on btrfs, Linux {}\nsandbox: 1 × {} loop device with direct I/O, data {}, metadata {}\n\n",
        p.bold("btrfs-lab demo:"),
        r.kernel,
        size(r.sandbox.size_bytes),
        names(&r.sandbox.data_profiles),
        names(&r.sandbox.metadata_profiles),
    );
    let cols = [&r.checksummed, &r.nocow];
    let verdict = |v: &ProbeReport| {
        let name = v.verdict.name();
        match v.verdict {
            Verdict::Direct => p.good(name),
            Verdict::Inconclusive => p.warn(name),
            _ => p.bad(name),
        }
    };
    let pad = |s: String, width: usize| {
        // Pad by visible width: colour codes take no columns.
        let visible = s.chars().count() - ansi_len(&s);
        format!("{s}{}", " ".repeat(width.saturating_sub(visible)))
    };
    t.push_str(&format!(
        "  {:<21} {:<26} {}\n",
        "",
        p.dim("checksummed directory"),
        p.dim("NOCOW directory")
    ));
    t.push_str(&format!(
        "  {:<21} {} {}\n",
        "verdict",
        pad(verdict(cols[0]), 26),
        verdict(cols[1])
    ));
    let ratio = |v: &ProbeReport| format!("{:.2}", v.test.ratio_median);
    t.push_str(&format!(
        "  {:<21} {:<26} {}\n",
        "dirtied / written",
        ratio(cols[0]),
        ratio(cols[1])
    ));
    let speed = |v: &ProbeReport| format_rate(v.test.throughput_bytes_per_sec);
    t.push_str(&format!(
        "  {:<21} {:<26} {}\n",
        "O_DIRECT write speed",
        speed(cols[0]),
        speed(cols[1])
    ));
    t.push('\n');
    let summary = if r.shows_the_trap() {
        "The checksummed directory's O_DIRECT writes went through the page cache (the kernel's \
         fallback for files with data checksums), while the NOCOW directory's stayed direct. \
         Put databases and VM images that use O_DIRECT in a NOCOW directory, and run benchmarks there."
            .to_owned()
    } else {
        format!(
            "checksummed: {} NOCOW: {}",
            r.checksummed.summary, r.nocow.summary
        )
    };
    t.push_str(&wrap(&summary, ""));
    t.push_str("sandbox removed.\n\n");
    t.push_str(&next_commands(r.shows_the_trap()));
    t
}

/// What to run next, on the user's own filesystem.
fn next_commands(trap: bool) -> String {
    let mut t = String::from("Next, on your own btrfs:\n");
    t.push_str("  btrfs-lab probe-dio DIR        does O_DIRECT stay direct in DIR?\n");
    if trap {
        t.push_str("  btrfs-lab nocow --migrate DIR  make DIR and the files in it NOCOW\n");
    }
    t
}

/// Bytes of ANSI escape sequences in `s` (they take no columns).
fn ansi_len(s: &str) -> usize {
    let mut n = 0;
    let mut in_escape = false;
    for c in s.chars() {
        if c == '\u{1b}' {
            in_escape = true;
        }
        if in_escape {
            n += 1;
            if c.is_ascii_alphabetic() {
                in_escape = false;
            }
        }
    }
    n
}

/// What the manual pages of this command add to clap's help: real command
/// lines and the pages to read next (read by `man`).
pub const PAGES: &[super::page::Declared] = &[super::page::Declared {
    words: &["demo"],
    documents: &["demo"],
    output: super::page::Shape::Document,
    examples: &[(
        "The O_DIRECT trap on a sandbox, checksummed vs NOCOW.",
        "btrfs-lab demo",
    )],
    see_also: &[],
    ..super::page::Declared::NONE
}];
