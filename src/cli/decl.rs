//! What each subcommand declares beside its arguments, in its own
//! `cli/<cmd>.rs` (its `PAGES`): the manual pages' examples and related
//! pages, its exit statuses with what each means for it, the JSON documents
//! it writes, whether it takes `--dry-run` and the shape of its output.
//!
//! Generated from the declarations: `--help`'s and the man pages' EXIT
//! STATUS ([`exit_rows`]) and the tables of `docs/exit-codes.md`
//! ([`markdown`]; `BTRFS_LAB_WRITE_EXIT_CODES=1 cargo test --features
//! test-hooks --bins cli::decl::` rewrites them, a test fails when they are
//! stale). The statuses themselves stay in the library's registry
//! ([`btrfs_lab::model::exit`]): the library returns them.

use btrfs_lab::model::exit as registry;

use super::page::row;
pub use super::page::{DEFAULT, Declared, Row};

/// btrfs-lab(1)'s and man's own declarations (here, not in man.rs: man
/// renders this registry).
const MAN_PAGES: &[Declared] = &[
    Declared {
        words: &[],
        examples: &[
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
        see_also: &["btrfs(8)", "mkfs.btrfs(8)", "fio(1)"],
        ..Declared::NONE
    },
    Declared {
        words: &["man"],
        exits: &[
            row(registry::OK, "the page was printed or the pages written."),
            row(registry::ERROR, "DIR cannot be created or written."),
            row(
                registry::USAGE,
                "bad command line (a subcommand that has no page, --json).",
            ),
        ],
        examples: &[
            ("Read the df page.", "btrfs-lab man df"),
            (
                "Install every page for man(1).",
                "btrfs-lab man --out-dir /usr/local/share/man/man1",
            ),
        ],
        see_also: &["man(1)"],
        ..Declared::NONE
    },
];

/// Every subcommand's declarations (each in its `cli/<cmd>.rs`).
const DECLARED: &[&[Declared]] = &[
    MAN_PAGES,
    super::sandbox::PAGES,
    super::probe_dio::PAGES,
    super::demo::PAGES,
    super::df::PAGES,
    super::usage::PAGES,
    super::show::PAGES,
    super::capacity::PAGES,
    super::device::PAGES,
    super::convert::PAGES,
    super::balance::PAGES,
    super::reclaim::PAGES,
    super::scrub::PAGES,
    super::links::PAGES,
    super::nocow::PAGES,
    super::apps::PAGES,
    super::read_test::PAGES,
    super::bench::PAGES,
    super::rescue::PAGES,
    super::doctor::PAGES,
    super::explain::PAGES,
    super::completions::PAGES,
];

/// Every declaration, btrfs-lab(1)'s first.
pub fn all() -> impl Iterator<Item = &'static Declared> {
    DECLARED.iter().flat_map(|d| d.iter())
}

/// The declaration of the command `words`.
pub fn declared(words: &[&str]) -> Option<&'static Declared> {
    all().find(|d| d.words == words)
}

/// The exit statuses of the command `words` (`["sandbox", "up"]`; `[]`
/// for btrfs-lab itself): its own, its parent's (`sandbox up` has
/// `sandbox`'s, not `device add` `device`'s), or [`DEFAULT`].
pub fn exit_rows(words: &[&str]) -> &'static [Row] {
    let own = |w: &[&str]| declared(w).map(|d| d.exits).filter(|e| !e.is_empty());
    own(words)
        .or_else(|| match words {
            ["sandbox", _, ..] => own(&["sandbox"]),
            _ => None,
        })
        .unwrap_or(DEFAULT)
}

/// The order of `docs/exit-codes.md`'s tables (the commands with statuses
/// of their own).
const DOC_ORDER: &[&[&str]] = &[
    &["probe-dio"],
    &["device", "replace"],
    &["device", "remove"],
    &["show"],
    &["links"],
    &["df"],
    &["usage"],
    &["read-test"],
    &["bench"],
    &["doctor"],
    &["explain"],
    &["nocow"],
    &["convert"],
    &["balance"],
    &["device", "add"],
    &["sandbox"],
    &["rescue"],
    &["reclaim"],
    &["scrub"],
    &["capacity"],
    &["man"],
    &["completions"],
];

/// Where the generated part of `docs/exit-codes.md` begins.
#[cfg_attr(not(test), allow(dead_code))] // used by the tests
pub const DOC_BEGIN: &str = "<!-- BEGIN generated from src/model/exit.rs and the \
declarations of src/cli/<cmd>.rs: BTRFS_LAB_WRITE_EXIT_CODES=1 cargo test --features \
test-hooks --bins cli::decl:: rewrites it; edit those, not this -->";
/// Where it ends.
#[cfg_attr(not(test), allow(dead_code))] // used by the tests
pub const DOC_END: &str = "<!-- END generated -->";

/// The generated part of `docs/exit-codes.md`, markers included: every
/// status, then each command's table.
#[cfg_attr(not(test), allow(dead_code))] // used by the tests
pub fn markdown() -> String {
    let cell = |s: &str| s.replace('|', "\\|");
    let mut out = format!("{DOC_BEGIN}\n\n## Every status\n\n");
    out.push_str("| status | name | commands | meaning |\n|---|---|---|---|\n");
    for s in registry::ALL {
        let commands = if s.commands.is_empty() {
            "every command".to_owned()
        } else {
            format!("`{}`", s.commands)
        };
        out.push_str(&format!(
            "| {} | `{}` | {} | {} |\n",
            s.code,
            s.name,
            commands,
            cell(s.meaning)
        ));
    }
    let tables = DOC_ORDER
        .iter()
        .map(|w| (format!("`{}`", w.join(" ")), exit_rows(w)))
        .chain(std::iter::once(("any other command".to_owned(), DEFAULT)));
    for (heading, rows) in tables {
        out.push_str(&format!(
            "\n## {heading}\n\n| status | name | meaning |\n|---|---|---|\n"
        ));
        for r in rows {
            out.push_str(&format!(
                "| {} | `{}` | {} |\n",
                r.status.code,
                r.status.name,
                cell(r.meaning)
            ));
        }
    }
    out.push('\n');
    out.push_str(DOC_END);
    out
}

/// `doc` with its generated part replaced by [`markdown`] (or put first,
/// after the title, when it has none).
#[cfg_attr(not(test), allow(dead_code))] // used by the tests
pub fn with_generated(doc: &str) -> String {
    match (doc.find(DOC_BEGIN), doc.find(DOC_END)) {
        (Some(b), Some(e)) if e > b => {
            format!("{}{}{}", &doc[..b], markdown(), &doc[e + DOC_END.len()..])
        }
        _ => {
            let (title, rest) = doc.split_once('\n').unwrap_or((doc, ""));
            format!("{title}\n\n{}\n{rest}", markdown())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::page::{Shape, usage_status};

    /// docs/exit-codes.md carries the registry's and the declarations'
    /// tables as they are now.
    #[test]
    fn docs_exit_codes_are_current() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/exit-codes.md");
        let doc = std::fs::read_to_string(&path).unwrap();
        if std::env::var_os("BTRFS_LAB_WRITE_EXIT_CODES").is_some() {
            std::fs::write(&path, with_generated(&doc)).unwrap();
        }
        let doc = std::fs::read_to_string(&path).unwrap();
        assert!(
            doc.contains(&markdown()),
            "docs/exit-codes.md differs from the declarations; regenerate with: \
             BTRFS_LAB_WRITE_EXIT_CODES=1 cargo test --features test-hooks --bins cli::decl::"
        );
    }

    /// Each command `--help`'s summary names for a status declares it,
    /// and every declared status is one of the registry.
    #[test]
    fn statuses_are_declared_by_the_commands_that_return_them() {
        for s in registry::ALL.iter().filter(|s| !s.commands.is_empty()) {
            let words: Vec<&str> = s
                .commands
                .split(' ')
                .take_while(|w| !w.starts_with('-'))
                .collect();
            assert!(
                exit_rows(&words).iter().any(|r| r.status == *s),
                "{} does not declare {} ({})",
                s.commands,
                s.code,
                s.name
            );
        }
        for d in all() {
            for r in d.exits {
                assert!(
                    registry::ALL.contains(&r.status),
                    "{:?}: {:?}",
                    d.words,
                    r.status
                );
            }
        }
        for w in DOC_ORDER {
            assert!(declared(w).is_some_and(|d| !d.exits.is_empty()), "{w:?}");
        }
    }

    /// A command's bad command line exits with a status its table lists.
    #[test]
    fn the_usage_status_is_declared_by_each_command() {
        for d in all() {
            let s = usage_status(d.words);
            assert!(
                exit_rows(d.words).iter().any(|r| r.status == s),
                "{:?} does not declare its usage status {}",
                d.words,
                s.code
            );
        }
        assert_eq!(usage_status(&["doctor"]).code, 3);
        assert_eq!(usage_status(&["device", "add"]).code, 2);
        assert_eq!(usage_status(&[]).code, 2);
    }

    #[test]
    fn exit_rows_are_found_by_command() {
        assert_eq!(exit_rows(&[]), DEFAULT);
        assert_eq!(exit_rows(&["sandbox", "up"]), exit_rows(&["sandbox"]));
        assert_eq!(exit_rows(&["sandbox", "list"]), exit_rows(&["sandbox"]));
        assert_eq!(exit_rows(&["device"]), DEFAULT);
        assert_eq!(exit_rows(&["device", "add"]), exit_rows(&["convert"]));
        assert_ne!(exit_rows(&["device", "remove"]), DEFAULT);
        assert_eq!(exit_rows(&["usage"]), exit_rows(&["df"]));
        assert!(exit_rows(&["show"]).iter().any(|r| r.status.code == 64));
    }

    /// Every document a command declares is one of the schema list, and
    /// every document of the list is declared by some command; each
    /// command that declares documents prints JSON, one that declares none
    /// only text.
    #[test]
    fn declared_documents_are_the_schema_list() {
        for d in all() {
            for name in d.documents {
                assert!(
                    btrfs_lab::schema::document(name).is_some(),
                    "{:?} declares {name}, which src/schema.rs does not list",
                    d.words
                );
            }
            assert_eq!(
                d.documents.is_empty(),
                d.output == Shape::Text,
                "{:?}: documents {:?}, output {:?}",
                d.words,
                d.documents,
                d.output
            );
        }
        for kind in btrfs_lab::schema::documents() {
            assert!(
                all().any(|d| d.documents.contains(&kind.name)),
                "no command declares the document {}",
                kind.name
            );
            if kind.json_lines && kind.name != "error" {
                assert!(
                    all().any(|d| d.documents.contains(&kind.name) && d.output == Shape::Lines),
                    "{} is JSON Lines, but no command that writes it declares Lines",
                    kind.name
                );
            }
        }
    }

    /// A command declared with --dry-run has the flag, and one that has
    /// the flag declares it.
    #[test]
    fn dry_run_is_declared_where_the_flag_is() {
        let mut root = super::super::command();
        root.build();
        let mut seen = 0;
        let mut walk = vec![(Vec::<String>::new(), root)];
        while let Some((words, cmd)) = walk.pop() {
            let has = cmd.get_arguments().any(|a| a.get_long() == Some("dry-run"));
            let w: Vec<&str> = words.iter().map(String::as_str).collect();
            let declares = declared(&w).is_some_and(|d| d.dry_run);
            assert_eq!(has, declares, "{w:?}: --dry-run {has}, declared {declares}");
            seen += usize::from(has);
            for sub in cmd.get_subcommands().filter(|s| s.get_name() != "help") {
                let mut w = words.clone();
                w.push(sub.get_name().to_owned());
                walk.push((w, sub.clone()));
            }
        }
        assert!(seen >= 9, "only {seen} commands with --dry-run");
    }

    /// Every subcommand has a declaration, and each declaration is one
    /// subcommand's.
    #[test]
    fn every_subcommand_is_declared_once() {
        let pages: Vec<Vec<String>> = super::super::man::pages()
            .into_iter()
            .map(|p| p.words)
            .collect();
        for w in &pages {
            let w: Vec<&str> = w.iter().map(String::as_str).collect();
            assert_eq!(
                all().filter(|d| d.words == w.as_slice()).count(),
                1,
                "{w:?}"
            );
        }
        assert_eq!(all().count(), pages.len());
    }

    /// The README says which commands print one JSON document and which
    /// JSON Lines as they declare it: each command declared `Lines` is
    /// named (`` `WORDS`` ) in its JSON Lines sentence, each declared
    /// `Document` (or its first word) in its one-document sentence.
    #[test]
    fn readme_tells_each_commands_json_shape() {
        let readme =
            std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).unwrap();
        let between = |from: &str, to: &str| -> String {
            let start = readme
                .find(from)
                .unwrap_or_else(|| panic!("README lacks {from:?}"));
            let rest = &readme[start..];
            rest[..rest
                .find(to)
                .unwrap_or_else(|| panic!("README lacks {to:?}"))]
                .to_owned()
        };
        let document = between("These print one JSON document", "These print JSON Lines");
        let lines = between("These print JSON Lines", "Every document and");
        for d in all().filter(|d| !d.words.is_empty()) {
            let words = d.words.join(" ");
            match d.output {
                Shape::Lines => assert!(
                    lines.contains(&format!("`{words}")),
                    "README does not say that `{words}` prints JSON Lines"
                ),
                Shape::Document => assert!(
                    document.contains(&format!("`{words}`"))
                        || document.contains(&format!("`{}`", d.words[0])),
                    "README does not say that `{words}` prints one JSON document"
                ),
                Shape::Text => {}
            }
        }
    }
}
