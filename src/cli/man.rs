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

/// How a page is shown.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Shown {
    /// Its roff source on stdout (piped: `btrfs-lab man df | man -l -`).
    Roff,
    /// Formatted and paged by this man(1): `man -l -`, the page on its
    /// stdin (argv, no shell; man picks the pager: MANPAGER, PAGER).
    Man(PathBuf),
    /// On a terminal with no man(1): the roff source, and a note.
    RoffNoMan,
}

/// How to show a page: `terminal` is whether stdout is one, `man` where
/// man(1) is (None: not installed).
fn shown(terminal: bool, man: Option<PathBuf>) -> Shown {
    match (terminal, man) {
        (false, _) => Shown::Roff,
        (true, Some(m)) => Shown::Man(m),
        (true, None) => Shown::RoffNoMan,
    }
}

/// One page on stdout: on a terminal formatted and paged by man(1), as
/// `man btrfs-lab-df` would; piped, its roff source.
fn show(page: &Page, out: &Output) -> Result<()> {
    let roff = page.render();
    let terminal = std::io::stdout().is_terminal();
    let man = terminal
        .then(|| btrfs_lab::sys::tools::find("man", "man-db").ok())
        .flatten()
        .map(|t| t.path);
    match shown(terminal, man) {
        Shown::Roff => out.text(&roff),
        Shown::Man(path) => {
            let man = btrfs_lab::sys::tools::Tool {
                name: "man".to_owned(),
                path,
            };
            man.run_on_terminal(&["-l".into(), "-".into()], roff.as_bytes())?;
        }
        Shown::RoffNoMan => {
            let words = page.words.join(" ");
            out.note(&format!(
                "man(1) is not installed (apt-get install man-db): printing the page's roff source; btrfs-lab {words}{}--help says the same as plain text",
                if words.is_empty() { "" } else { " " }
            ));
            out.text(&roff);
        }
    }
    Ok(())
}

/// The exit statuses each page lists: btrfs-lab(1) every number (the
/// registry's summary, [`btrfs_lab::model::exit`]), a command its declared
/// table ([`super::decl::exit_rows`]).
fn exit_statuses(words: &[String]) -> Vec<(u8, String)> {
    if words.is_empty() {
        return registry::summary()
            .into_iter()
            .map(|(code, text)| (code, format!("{text}.")))
            .collect();
    }
    let w: Vec<&str> = words.iter().map(String::as_str).collect();
    super::decl::exit_rows(&w)
        .iter()
        .map(|r| (r.status.code, r.meaning.to_owned()))
        .collect()
}

use super::page::Declared;

fn declared(words: &[String]) -> Option<&'static Declared> {
    let w: Vec<&str> = words.iter().map(String::as_str).collect();
    super::decl::declared(&w)
}

/// Real command lines for each page: (what it does, the line).
fn examples(words: &[String]) -> &'static [(&'static str, &'static str)] {
    declared(words).map_or(&[], |d| d.examples)
}

/// Other manual pages worth reading next to this one.
fn see_also(words: &[String]) -> &'static [&'static str] {
    declared(words).map_or(&[], |d| d.see_also)
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
    fn a_page_is_formatted_by_man_only_on_a_terminal() {
        let man = PathBuf::from("/usr/bin/man");
        // Piped (`btrfs-lab man df | man -l -`, `> page.1`): roff, whether
        // man is installed or not.
        assert_eq!(shown(false, Some(man.clone())), Shown::Roff);
        assert_eq!(shown(false, None), Shown::Roff);
        // On a terminal: man -l - formats and pages it.
        assert_eq!(shown(true, Some(man.clone())), Shown::Man(man));
        // No man(1): roff, with a note.
        assert_eq!(shown(true, None), Shown::RoffNoMan);
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
