//! `btrfs-lab man [--out-dir DIR] [SUBCOMMAND]`: manual pages generated at run
//! time from the clap definition (clap_mangen), so every flag and help text
//! in them is the one `--help` shows. One page per subcommand, nested ones
//! included (`btrfs-lab-sandbox-up.1`), each with NAME, SYNOPSIS,
//! DESCRIPTION, OPTIONS, NOTES (the long help's closing text), EXIT STATUS,
//! EXAMPLES and SEE ALSO. The exit statuses and examples are the tables
//! below (docs/exit-codes.md and subcommands/*.md say the same); a test
//! parses every example with the real command line.

use std::io::IsTerminal;
use std::path::PathBuf;

use clap::Args;
use clap_mangen::Man;
use clap_mangen::roff::{Roff, bold, italic, roman};

use btrfs_lab::error::{Error, Result, exit};
use btrfs_lab::model::exit as registry;
use btrfs_lab::sys::fs::outfile::OutputDir;

use super::output::Output;

#[derive(Debug, Args)]
pub struct ManArgs {
    /// Write the pages into DIR (created if missing), one file per page:
    /// btrfs-lab.1, btrfs-lab-df.1, btrfs-lab-sandbox-up.1, ...; with a
    /// SUBCOMMAND, that page and those of its subcommands.
    #[arg(long = "out-dir", value_name = "DIR")]
    dir: Option<PathBuf>,
    /// The subcommand whose page to print, as typed (`df`, `sandbox up`) or
    /// as the page is named (`sandbox-up`, `btrfs-lab-df`); nothing: the
    /// page of btrfs-lab itself.
    #[arg(value_name = "SUBCOMMAND")]
    subcommand: Vec<String>,
}

/// One manual page: the words that reach it (`["sandbox", "up"]`) and its
/// built clap command.
pub struct Page {
    /// Subcommand words after `btrfs-lab`; empty for the top page.
    pub words: Vec<String>,
    cmd: clap::Command,
}

impl Page {
    /// `btrfs-lab-sandbox-up`.
    pub fn name(&self) -> String {
        std::iter::once("btrfs-lab")
            .chain(self.words.iter().map(String::as_str))
            .collect::<Vec<_>>()
            .join("-")
    }

    /// `btrfs-lab-sandbox-up.1`.
    pub fn file_name(&self) -> String {
        format!("{}.1", self.name())
    }

    /// The page in roff.
    pub fn render(&self) -> String {
        let man = Man::new(self.cmd.clone())
            .title(self.name().to_uppercase())
            .section("1")
            .source(format!("btrfs-lab {}", env!("CARGO_PKG_VERSION")))
            .manual("btrfs-lab manual");
        let mut buf: Vec<u8> = Vec::new();
        // Writing into a Vec cannot fail.
        let _ = man.render_title(&mut buf);
        let _ = man.render_name_section(&mut buf);
        let _ = man.render_synopsis_section(&mut buf);
        let _ = man.render_description_section(&mut buf);
        if self.cmd.get_arguments().any(|a| !a.is_hide_set()) {
            let _ = man.render_options_section(&mut buf);
        }
        if self.cmd.get_subcommands().any(|s| !s.is_hide_set()) {
            let _ = man.render_subcommands_section(&mut buf);
        }
        let mut roff = Roff::new();
        // The closing text of --help, unless it is only the exit statuses
        // (btrfs-lab's own): EXIT STATUS below says them.
        if let Some(after) = self
            .cmd
            .get_after_long_help()
            .or_else(|| self.cmd.get_after_help())
            .filter(|a| !a.to_string().starts_with("Exit status"))
        {
            roff.control("SH", ["NOTES"]);
            roff.control("nf", []);
            for line in after.to_string().lines() {
                roff.text([roman(line)]);
            }
            roff.control("fi", []);
        }
        roff.control("SH", ["EXIT STATUS"]);
        for (status, meaning) in exit_statuses(&self.words) {
            roff.control("TP", []);
            roff.text([bold(status.to_string())]);
            roff.text([roman(meaning)]);
        }
        roff.control("SH", ["EXAMPLES"]);
        for (what, line) in examples(&self.words) {
            roff.control("TP", []);
            roff.text([roman(*what)]);
            // A command line is not filled or justified: it is copied.
            roff.control("nf", []);
            roff.text([bold(format!("$ {line}"))]);
            roff.control("fi", []);
        }
        roff.control("SH", ["SEE ALSO"]);
        let mut refs: Vec<String> = Vec::new();
        if !self.words.is_empty() {
            let parent = &self.words[..self.words.len() - 1];
            refs.push(format!(
                "{}(1)",
                std::iter::once("btrfs-lab")
                    .chain(parent.iter().map(String::as_str))
                    .collect::<Vec<_>>()
                    .join("-")
            ));
        }
        for sub in self.cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
            refs.push(format!("{}-{}(1)", self.name(), sub.get_name()));
        }
        refs.extend(see_also(&self.words).iter().map(|s| (*s).to_owned()));
        let last = refs.len().saturating_sub(1);
        for (i, r) in refs.iter().enumerate() {
            let sep = if i == last { "" } else { "," };
            roff.text([italic(r.as_str()), roman(sep)]);
        }
        roff.control("PP", []);
        roff.text([roman(
            "The same text as help: btrfs-lab [SUBCOMMAND] --help. Exit statuses of every \
             command: /usr/share/doc/btrfs-lab/docs/exit-codes.md.",
        )]);
        roff.control("SH", ["VERSION"]);
        roff.text([roman(format!("btrfs-lab {}", env!("CARGO_PKG_VERSION")))]);
        let _ = roff.to_writer(&mut buf);
        // Each section rendered on its own repeats roff's two-line
        // apostrophe preamble; the page needs it once, at the top.
        let text = String::from_utf8_lossy(&buf);
        let mut page = String::with_capacity(text.len());
        let mut preamble_seen = false;
        let mut lines = text.lines().peekable();
        while let Some(line) = lines.next() {
            if line.starts_with(".ie \\n(.g .ds Aq")
                && lines.peek().is_some_and(|l| l.starts_with(".el .ds Aq"))
            {
                let el = lines.next().unwrap_or_default();
                if preamble_seen {
                    continue;
                }
                preamble_seen = true;
                page.push_str(line);
                page.push('\n');
                page.push_str(el);
                page.push('\n');
                continue;
            }
            page.push_str(line);
            page.push('\n');
        }
        page
    }
}

/// Every page: btrfs-lab itself, then each subcommand, depth first in the
/// order `--help` lists them. The `help` subcommand gets none.
pub fn pages() -> Vec<Page> {
    let mut root = super::command().disable_help_subcommand(true);
    root.build();
    let mut pages = Vec::new();
    collect(&root, Vec::new(), &mut pages);
    pages
}

fn collect(cmd: &clap::Command, words: Vec<String>, pages: &mut Vec<Page>) {
    pages.push(Page {
        words: words.clone(),
        cmd: cmd.clone(),
    });
    // clap adds a `help` subcommand when the definition is built; it
    // gets no page of its own.
    let documented = |s: &&clap::Command| !s.is_hide_set() && s.get_name() != "help";
    for sub in cmd.get_subcommands().filter(documented) {
        let mut w = words.clone();
        w.push(sub.get_name().to_owned());
        collect(sub, w, pages);
    }
}

/// Finds the page `words` names: `sandbox up`, `sandbox-up`,
/// `btrfs-lab-sandbox-up`, `btrfs-lab-sandbox-up.1`.
fn find<'a>(pages: &'a [Page], words: &[String]) -> Option<&'a Page> {
    let joined = words.join("-");
    let joined = joined.strip_suffix(".1").unwrap_or(&joined);
    let joined = joined.strip_prefix("btrfs-lab").unwrap_or(joined);
    let joined = joined.strip_prefix('-').unwrap_or(joined);
    pages.iter().find(|p| p.words.join("-") == joined)
}

pub fn run(args: ManArgs, out: &Output) -> Result<u8> {
    if out.json {
        return Err(
            Error::usage("man prints manual pages (roff); --json does not apply")
                .with_hint("run it without --json: btrfs-lab man df | man -l -"),
        );
    }
    let all = pages();
    let selected = select(&all, &args.subcommand)?;
    match args.dir {
        // One page: the first selected (the named one, or btrfs-lab's).
        None => show(selected[0], out)?,
        Some(dir) => {
            // Held once, by descriptor: a link another user planted in the
            // path is refused, never followed, and every page is written
            // inside the directory held (a new file renamed into place).
            let held = OutputDir::create(&dir, 0o755)?;
            for page in selected {
                held.write(page.file_name(), page.render().as_bytes(), 0o644)?;
                // As the user wrote DIR (the held path is absolute).
                out.text(&format!("{}\n", dir.join(page.file_name()).display()));
            }
        }
    }
    Ok(exit::OK)
}

/// The pages of `words` and below (all of them when `words` is empty).
fn select<'a>(all: &'a [Page], words: &[String]) -> Result<Vec<&'a Page>> {
    if words.is_empty() {
        return Ok(all.iter().collect());
    }
    let page = find(all, words).ok_or_else(|| {
        let pages: Vec<String> = all
            .iter()
            .filter(|p| !p.words.is_empty())
            .map(|p| p.words.join(" "))
            .collect();
        Error::usage(format!("no manual page for `{}`", words.join(" ")))
            .with_hint(format!("pages: {}", pages.join(", ")))
    })?;
    Ok(all
        .iter()
        .filter(|p| p.words.starts_with(&page.words))
        .collect())
}

/// One page on stdout: on a terminal formatted and paged by man(1), as
/// `man btrfs-lab-df` would; piped, its roff source.
fn show(page: &Page, out: &Output) -> Result<()> {
    let roff = page.render();
    if !std::io::stdout().is_terminal() {
        out.text(&roff);
        return Ok(());
    }
    match btrfs_lab::sys::tools::find("man", "man-db") {
        Ok(man) => man.run_on_terminal(&["-l".into(), "-".into()], roff.as_bytes()),
        Err(_) => {
            out.note(
                "man(1) is not installed (apt-get install man-db): printing the page's roff source",
            );
            out.text(&roff);
            Ok(())
        }
    }
}

/// The exit statuses each page lists, from the registry
/// ([`btrfs_lab::model::exit`]): btrfs-lab(1) every number, a command its
/// own table.
fn exit_statuses(words: &[String]) -> Vec<(u8, String)> {
    if words.is_empty() {
        return registry::summary()
            .into_iter()
            .map(|(code, text)| (code, format!("{text}.")))
            .collect();
    }
    let w: Vec<&str> = words.iter().map(String::as_str).collect();
    registry::page(&w)
        .rows
        .iter()
        .map(|r| (r.status.code, r.meaning.to_owned()))
        .collect()
}

/// Real command lines for each page: (what it does, the line).
fn examples(words: &[String]) -> &'static [(&'static str, &'static str)] {
    let w: Vec<&str> = words.iter().map(String::as_str).collect();
    match w.as_slice() {
        [] => &[
            (
                "Where the throughput of /mnt/data goes: a health check first.",
                "btrfs-lab doctor /mnt/data",
            ),
            (
                "A throwaway btrfs on two loop devices to rehearse on.",
                "btrfs-lab sandbox up --name demo --dir sbx --devices 2 --device-size 1G --data raid0 --metadata raid1",
            ),
            ("Help of one subcommand.", "btrfs-lab df --help"),
        ],
        ["sandbox"] => &[(
            "The sandboxes and whether they are up.",
            "btrfs-lab sandbox list",
        )],
        ["sandbox", "up"] => &[
            (
                "Two 1 GiB loop devices, data RAID0, metadata RAID1, mounted at sbx/mnt.",
                "btrfs-lab sandbox up --name space --dir sbx --devices 2 --device-size 1G --data raid0 --metadata raid1",
            ),
            (
                "Show the plan only.",
                "btrfs-lab sandbox up --dry-run --name demo --dir sbx --devices 2 --device-size 512M --data raid0 --metadata raid1",
            ),
            (
                "An ext4 one, to compare.",
                "btrfs-lab sandbox up --name plain --dir e4 --fs ext4 --device-size 256M",
            ),
        ],
        ["sandbox", "down"] => &[
            (
                "Remove the sandbox mounted at sbx/mnt.",
                "btrfs-lab sandbox down --yes sbx/mnt",
            ),
            (
                "Remove every sandbox.",
                "btrfs-lab sandbox down --yes --all",
            ),
        ],
        ["sandbox", "list"] => &[
            ("As text.", "btrfs-lab sandbox list"),
            ("As JSON.", "btrfs-lab sandbox list --json"),
        ],
        ["probe-dio"] => &[
            (
                "Are O_DIRECT writes in /mnt/data/db direct?",
                "btrfs-lab probe-dio --file-size 32M /mnt/data/db",
            ),
            (
                "Watch a running database for 3 seconds.",
                "btrfs-lab probe-dio --pid 1234 --seconds 3",
            ),
            (
                "The verdict as JSON.",
                "btrfs-lab probe-dio --json --file-size 32M /mnt/data/db",
            ),
        ],
        ["demo"] => &[(
            "The O_DIRECT trap on a sandbox, checksummed vs NOCOW.",
            "btrfs-lab demo --file-size 32M",
        )],
        ["df"] => &[
            ("Space of a mounted btrfs.", "btrfs-lab df /mnt/data"),
            ("In bytes.", "btrfs-lab df -b /mnt/data"),
            (
                "Read `btrfs filesystem df` output pasted into a ticket.",
                "btrfs-lab df --parse ticket.txt",
            ),
            ("As JSON.", "btrfs-lab df --json /mnt/data"),
        ],
        ["usage"] => &[
            (
                "Allocation per profile and device.",
                "btrfs-lab usage /mnt/data",
            ),
            (
                "Read pasted `btrfs filesystem usage` output.",
                "btrfs-lab usage --parse usage.txt",
            ),
        ],
        ["show"] => &[
            (
                "Every btrfs, its devices and error counters.",
                "btrfs-lab show",
            ),
            ("One filesystem as JSON.", "btrfs-lab show --json /mnt/data"),
        ],
        ["device"] | ["device", "add"] => &[
            (
                "What adding /dev/nvme2n1 would do.",
                "btrfs-lab device add --dry-run /mnt/data /dev/nvme2n1",
            ),
            (
                "Add it, then convert data to RAID0 and metadata to RAID1.",
                "btrfs-lab device add --then-convert --data raid0 --metadata raid1 /mnt/data /dev/nvme2n1",
            ),
        ],
        ["device", "replace"] => &[
            (
                "The plan for replacing device 2 (failing, or missing) by /dev/nvme3n1.",
                "btrfs-lab device replace --dry-run /mnt/data 2 /dev/nvme3n1",
            ),
            (
                "Replace it, then scrub the new device; Ctrl-C leaves it running.",
                "btrfs-lab device replace --scrub /mnt/data 2 /dev/nvme3n1",
            ),
            (
                "Where it is.",
                "btrfs-lab device replace /mnt/data --status",
            ),
        ],
        ["device", "remove"] => &[
            (
                "The plan (order, space, what moves) for removing two devices.",
                "btrfs-lab device remove --dry-run /mnt/data 3 /dev/nvme4n1",
            ),
            (
                "Drop a device that is gone, on a filesystem mounted -o degraded.",
                "btrfs-lab device remove /mnt/data missing",
            ),
        ],
        ["reclaim"] => &[
            (
                "The plan only: each step, the data it moves, the room it leaves.",
                "btrfs-lab reclaim --dry-run /mnt/data",
            ),
            (
                "Make room for a metadata chunk without asking.",
                "btrfs-lab reclaim --yes /mnt/data",
            ),
            (
                "Free 20 GiB of unallocated space, relocating chunks up to 50% used.",
                "btrfs-lab reclaim --yes /mnt/data --goal 20G --max-usage 50",
            ),
        ],
        ["scrub"] => &[
            ("The plan only.", "btrfs-lab scrub --dry-run /mnt/data"),
            (
                "Scrub at most 200 MB/s per device, without asking.",
                "btrfs-lab scrub --yes --limit 200M /mnt/data",
            ),
            (
                "Where a scrub stands (btrfs scrub start's too).",
                "btrfs-lab scrub --status /mnt/data",
            ),
            (
                "Continue an interrupted scrub.",
                "btrfs-lab scrub --resume --yes /mnt/data",
            ),
        ],
        ["convert"] => &[
            (
                "The plan only.",
                "btrfs-lab convert --dry-run /mnt/data --data raid0 --metadata raid1",
            ),
            (
                "Convert without asking.",
                "btrfs-lab convert --yes /mnt/data --data raid0 --metadata raid1",
            ),
            (
                "Where a conversion stands.",
                "btrfs-lab convert --status /mnt/data",
            ),
            (
                "Continue a paused conversion.",
                "btrfs-lab convert --resume /mnt/data",
            ),
        ],
        ["links"] => &[
            ("The PCIe links of every NVMe drive.", "btrfs-lab links"),
            (
                "Those behind a filesystem, and its ceiling.",
                "btrfs-lab links /mnt/data",
            ),
            (
                "From a captured tree instead of this machine.",
                "btrfs-lab links --sysroot reference /mnt/models",
            ),
        ],
        ["nocow"] => &[
            (
                "What would be done.",
                "btrfs-lab nocow --dry-run /mnt/data/db",
            ),
            (
                "A NOCOW directory for VM images.",
                "btrfs-lab nocow --yes /mnt/data/vm",
            ),
            ("Audit a directory.", "btrfs-lab nocow --check /mnt/data/db"),
            (
                "Migrate existing files.",
                "btrfs-lab nocow --migrate --yes /mnt/data/db",
            ),
        ],
        ["read-test"] => &[
            (
                "Fastest way to read a model file, cold cache.",
                "btrfs-lab read-test /mnt/models/model.bin",
            ),
            (
                "Two methods, several thread counts.",
                "btrfs-lab read-test --methods direct,buffered --threads 1,2,4 /mnt/models/model.bin",
            ),
        ],
        ["bench"] => &[
            (
                "The suite on a directory.",
                "btrfs-lab bench --file-size 2G /mnt/data",
            ),
            (
                "The figures for node_exporter's textfile collector too.",
                "btrfs-lab bench --textfile /var/lib/prometheus/node-exporter/btrfs-lab-bench.prom /mnt/data",
            ),
            (
                "Sustained writes until the drive's cache is full.",
                "btrfs-lab bench --sustained 4G --yes /mnt/data",
            ),
            (
                "Metadata operations.",
                "btrfs-lab bench --small-files --files 3000 --threads 2 /mnt/data",
            ),
            (
                "Each test's trend over the saved runs of this filesystem.",
                "btrfs-lab bench --history /mnt/data",
            ),
            (
                "Two saved runs and a saved file against the first.",
                "btrfs-lab bench --compare 12 15 before.json",
            ),
        ],
        ["doctor"] => &[
            (
                "What is wrong with /mnt/data.",
                "btrfs-lab doctor /mnt/data",
            ),
            (
                "For Prometheus' node_exporter textfile collector.",
                "btrfs-lab doctor --format prometheus /mnt/data",
            ),
        ],
        ["rescue"] => &[
            (
                "Which files of a degraded, read-only mount are intact.",
                "btrfs-lab rescue /mnt/data",
            ),
            (
                "Copy them out, with the readable parts of the damaged ones.",
                "btrfs-lab rescue /mnt/data --copy-to /media/usb/rescued --partial",
            ),
        ],
        ["man"] => &[
            ("Read the df page.", "btrfs-lab man df"),
            (
                "Install every page for man(1).",
                "btrfs-lab man --out-dir /usr/local/share/man/man1",
            ),
        ],
        ["completions"] => &[
            (
                "Bash completion for every user.",
                "btrfs-lab completions bash",
            ),
            ("Zsh completion.", "btrfs-lab completions zsh"),
        ],
        _ => &[],
    }
}

/// Other manual pages worth reading next to this one.
fn see_also(words: &[String]) -> &'static [&'static str] {
    let w: Vec<&str> = words.iter().map(String::as_str).collect();
    match w.as_slice() {
        [] => &["btrfs(8)", "mkfs.btrfs(8)", "fio(1)"],
        ["df"] => &["btrfs-filesystem(8)"],
        ["usage"] => &["btrfs-filesystem(8)"],
        ["show"] => &["btrfs-filesystem(8)", "btrfs-device(8)"],
        ["device", ..] => &["btrfs-device(8)", "btrfs-balance(8)"],
        ["convert"] | ["reclaim"] => &["btrfs-balance(8)"],
        ["scrub"] => &["btrfs-scrub(8)"],
        ["nocow"] => &["chattr(1)", "lsattr(1)"],
        ["bench"] | ["read-test"] => &["fio(1)"],
        ["probe-dio"] => &["open(2)"],
        ["rescue"] => &["btrfs-rescue(8)", "btrfs-restore(8)", "mount(8)"],
        ["sandbox", ..] => &["losetup(8)", "mkfs.btrfs(8)"],
        ["completions"] | ["man"] => &["man(1)"],
        _ => &[],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn has_section(page: &str, name: &str) -> bool {
        page.lines()
            .any(|l| l == format!(".SH {name}") || l == format!(".SH \"{name}\""))
    }

    #[test]
    fn every_subcommand_has_a_page_with_every_section() {
        let all = pages();
        let names: Vec<String> = all.iter().map(Page::file_name).collect();
        for expected in [
            "btrfs-lab.1",
            "btrfs-lab-df.1",
            "btrfs-lab-sandbox-up.1",
            "btrfs-lab-sandbox-down.1",
            "btrfs-lab-sandbox-list.1",
            "btrfs-lab-device-add.1",
            "btrfs-lab-man.1",
            "btrfs-lab-completions.1",
        ] {
            assert!(names.iter().any(|n| n == expected), "{expected}: {names:?}");
        }
        assert!(!names.iter().any(|n| n.contains("help")), "{names:?}");
        for page in &all {
            let text = page.render();
            for section in [
                "NAME",
                "SYNOPSIS",
                "DESCRIPTION",
                "OPTIONS",
                "EXIT STATUS",
                "EXAMPLES",
                "SEE ALSO",
            ] {
                assert!(
                    has_section(&text, section),
                    "{} has no {section} section:\n{text}",
                    page.file_name()
                );
            }
            assert_eq!(
                text.matches(".ie \\n(.g .ds Aq").count(),
                1,
                "{}: the preamble once",
                page.file_name()
            );
            assert!(
                !examples(&page.words).is_empty(),
                "{} has no examples",
                page.file_name()
            );
            assert!(
                text.contains(&format!(".TH {} 1", page.name().to_uppercase())),
                "{}",
                text.lines().next().unwrap_or_default()
            );
        }
    }

    #[test]
    fn every_example_is_a_valid_command_line_of_its_page() {
        for page in pages() {
            for (_, line) in examples(&page.words) {
                let argv = line.split_whitespace().collect::<Vec<_>>();
                let parsed = super::super::command()
                    .try_get_matches_from(&argv)
                    .and_then(|m| {
                        <super::super::Cli as clap::FromArgMatches>::from_arg_matches(&m)
                    });
                assert!(
                    parsed.is_ok() || line.ends_with("--help"),
                    "{}: `{line}`: {}",
                    page.file_name(),
                    parsed.err().map(|e| e.to_string()).unwrap_or_default()
                );
                let tail: Vec<&str> = argv[1..].to_vec();
                assert!(
                    tail.starts_with(&page.words.iter().map(String::as_str).collect::<Vec<_>>()),
                    "{}: `{line}` is not a command line of this page",
                    page.file_name()
                );
            }
        }
    }

    /// Every status a table of docs/exit-codes.md gives for a command is
    /// on that command's page (the first section, "Every command" and
    /// probe-dio's verdicts, on btrfs-lab.1).
    #[test]
    fn pages_list_the_statuses_of_docs_exit_codes() {
        let docs = include_str!("../../docs/exit-codes.md");
        let mut checked = 0;
        for (i, section) in docs.split("\n## ").enumerate() {
            // The title, "Every status" and any heading that names no
            // command: btrfs-lab(1), which lists every number.
            let words: Vec<String> =
                if i == 0 || !section.lines().next().unwrap_or_default().contains('`') {
                    Vec::new()
                } else {
                    let heading = section.lines().next().unwrap_or_default();
                    let first = heading.split(',').next().unwrap_or_default();
                    first
                        .trim_matches(|c: char| c == '`' || c.is_whitespace())
                        .split_whitespace()
                        .map(str::to_owned)
                        .collect()
                };
            let documented: Vec<u8> = section
                .lines()
                .filter_map(|l| l.strip_prefix("| "))
                .filter_map(|l| l.split('|').next()?.trim().parse().ok())
                .collect();
            let listed: Vec<u8> = exit_statuses(&words).iter().map(|(s, _)| *s).collect();
            for s in &documented {
                assert!(
                    listed.contains(s),
                    "docs/exit-codes.md gives {s} for {words:?}; its page lists {listed:?}"
                );
            }
            checked += documented.len();
        }
        assert!(
            checked >= 20,
            "only {checked} statuses found in docs/exit-codes.md"
        );
    }

    #[test]
    fn pages_are_found_by_any_spelling() {
        let all = pages();
        for spelling in [
            vec!["sandbox", "up"],
            vec!["sandbox-up"],
            vec!["btrfs-lab-sandbox-up"],
            vec!["btrfs-lab-sandbox-up.1"],
        ] {
            let words: Vec<String> = spelling.iter().map(|s| (*s).to_owned()).collect();
            assert_eq!(
                find(&all, &words).map(Page::name).as_deref(),
                Some("btrfs-lab-sandbox-up"),
                "{spelling:?}"
            );
        }
        assert!(find(&all, &["nosuch".to_owned()]).is_none());
        assert_eq!(
            find(&all, &["btrfs-lab".to_owned()])
                .map(Page::name)
                .as_deref(),
            Some("btrfs-lab")
        );
    }

    #[test]
    fn a_symlink_where_a_page_goes_is_refused_not_followed() {
        let t = tempfile::tempdir().unwrap();
        let victim = t.path().join("victim");
        std::fs::write(&victim, "keep\n").unwrap();
        let page = t.path().join("btrfs-lab.1");
        std::os::unix::fs::symlink(&victim, &page).unwrap();
        let dir = OutputDir::create(t.path(), 0o755).unwrap();
        let err = dir.write("btrfs-lab.1", b".TH X 1\n", 0o644).unwrap_err();
        assert!(err.to_string().contains("symbolic link"), "{err}");
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "keep\n");
        assert!(std::fs::symlink_metadata(&page).unwrap().is_symlink());
        let left: Vec<_> = std::fs::read_dir(t.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(left.len(), 2, "no temporary file is left behind: {left:?}");
    }
}
