//! The repository keeps its promises: the README gives exactly two set-up
//! commands, CI runs the second one unchanged, the docs the code points to
//! exist.

use std::fs;
use std::path::Path;

fn read(rel: &str) -> String {
    fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(rel))
        .unwrap_or_else(|e| panic!("{rel}: {e}"))
}

/// The commands of the README's "Set up" section: the lines of its
/// ```sh blocks.
fn readme_commands() -> Vec<String> {
    let readme = read("README.md");
    let section: String = readme
        .split("\n## ")
        .find(|s| s.starts_with("Set up"))
        .expect("README has a '## Set up' section")
        .to_owned();
    let mut commands = Vec::new();
    let mut in_block = false;
    for line in section.lines() {
        if line.starts_with("```") {
            in_block = line.trim() == "```sh";
            continue;
        }
        if in_block && !line.trim().is_empty() && !line.trim_start().starts_with('#') {
            commands.push(line.trim().to_owned());
        }
    }
    commands
}

#[test]
fn readme_gives_exactly_two_commands_and_ci_runs_the_second() {
    let commands = readme_commands();
    assert_eq!(commands.len(), 2, "{commands:?}");
    let ci = read(".ci/run");
    assert!(
        ci.lines().any(|l| l.trim() == commands[1]),
        ".ci/run must call `{}` unchanged",
        commands[1]
    );
    for c in &commands {
        let script = c.split_whitespace().next().unwrap();
        let p = Path::new(env!("CARGO_MANIFEST_DIR")).join(script);
        assert!(p.exists(), "{script} named in README does not exist");
        use std::os::unix::fs::PermissionsExt;
        assert!(
            fs::metadata(&p).unwrap().permissions().mode() & 0o111 != 0,
            "{script} is not executable"
        );
    }
}

#[test]
fn documented_files_exist() {
    for f in [
        "docs/decisions.md",
        "docs/exit-codes.md",
        "docs/json.md",
        "docs/testing.md",
        "docs/architecture.md",
    ] {
        assert!(!read(f).trim().is_empty(), "{f} is empty");
    }
    let decisions = read("docs/decisions.md");
    let manifest = read("Cargo.toml");
    let deps: Vec<&str> = manifest
        .split("[dependencies]")
        .nth(1)
        .unwrap()
        .split("\n[")
        .next()
        .unwrap()
        .lines()
        .filter(|l| !l.trim_start().starts_with('#'))
        .filter_map(|l| l.split('=').next())
        .map(str::trim)
        .filter(|d| !d.is_empty())
        .collect();
    for d in deps {
        assert!(
            decisions.contains(&format!("`{d}`")),
            "docs/decisions.md does not explain the dependency `{d}`"
        );
    }
}

#[test]
fn exit_codes_in_help_match_the_docs() {
    let out = std::process::Command::new(crate::common::bin())
        .arg("--help")
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&out.stdout);
    let doc = read("docs/exit-codes.md");
    for code in ["130", "buffered-fallback", "profile-forced", "inconclusive"] {
        assert!(help.contains(code), "--help lacks {code}");
        assert!(doc.contains(code), "docs/exit-codes.md lacks {code}");
    }
}

/// docs/architecture.md draws the tree as it is: every room and file it
/// names exists, and every file of `src/` is named in the entry of its room
/// (`src/NAME.rs` at the start of a line for a file of `src/` itself; a
/// room is a line `src/NAME/` or an indented `NAME/` under `src/<job>/` or
/// `src/sys/`, with the lines indented below it; a file of a folder inside
/// a room is named with its folder: `watch/report.rs`, or `watch/` then
/// `report.rs` in the same entry).
#[test]
fn architecture_map_names_every_file_of_every_room() {
    let doc = read("docs/architecture.md");
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let map = doc
        .split("```")
        .nth(1)
        .expect("docs/architecture.md has no map in a ``` block");
    // Entries: (room path below src/, its text).
    let mut entries: Vec<(String, String)> = Vec::new();
    let mut parent = String::new();
    for line in map.lines() {
        if let Some(rest) = line.strip_prefix("src/") {
            let word = rest.split_whitespace().next().unwrap_or("");
            parent = if word == "sys/" {
                "sys/".into()
            } else {
                String::new()
            };
            if !word.contains('<') {
                assert!(
                    root.join("src").join(word).exists(),
                    "docs/architecture.md names src/{word}, which does not exist"
                );
                entries.push((word.to_string(), line.to_string()));
            } else {
                entries.push((String::new(), String::new()));
            }
        } else if let Some(rest) = line.strip_prefix("  ")
            && !rest.starts_with(' ')
            && rest
                .split_whitespace()
                .next()
                .is_some_and(|w| w.ends_with('/'))
        {
            for word in rest.split_whitespace().take_while(|w| w.ends_with('/')) {
                let room = format!("{parent}{word}");
                assert!(
                    root.join("src").join(&room).is_dir(),
                    "docs/architecture.md names the room src/{room}, which does not exist"
                );
                entries.push((room, line.to_string()));
            }
        } else if let Some(last) = entries.last_mut() {
            last.1.push('\n');
            last.1.push_str(line);
        }
    }
    let names = |text: &str, name: &str| {
        text.split(|c: char| c.is_whitespace() || "(),:;".contains(c))
            .any(|w| w == name)
    };
    let mut missing = Vec::new();
    let mut files = Vec::new();
    let mut stack = vec![root.join("src")];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "rs") {
                files.push(p.strip_prefix(root.join("src")).unwrap().to_path_buf());
            }
        }
    }
    for f in &files {
        let f = f.to_string_lossy().to_string();
        // The deepest room the file is in.
        let room = entries
            .iter()
            .filter(|(r, _)| r.ends_with('/') && f.starts_with(r.as_str()))
            .max_by_key(|(r, _)| r.len());
        let ok = match room {
            None => entries.iter().any(|(r, _)| *r == f),
            Some((r, text)) => {
                let inner = &f[r.len()..];
                match inner.rsplit_once('/') {
                    None => names(text, inner),
                    Some((folder, file)) => {
                        names(text, inner)
                            || (names(text, &format!("{folder}/")) && names(text, file))
                    }
                }
            }
        };
        if !ok {
            missing.push(format!("src/{f}"));
        }
    }
    missing.sort();
    assert!(
        missing.is_empty(),
        "docs/architecture.md's map does not name these files in their room's entry:\n{}",
        missing.join("\n")
    );
}

/// The README's table of commands names every subcommand `--help` lists
/// (a row starting "| `btrfs-lab NAME"), and the rows of a command with
/// subcommands name each of them (`device add`, `sandbox up / down / list`).
#[test]
fn readme_names_every_subcommand() {
    let readme = read("README.md");
    let rows = |name: &str| -> Vec<&str> {
        let start = format!("| `btrfs-lab {name}");
        readme
            .lines()
            .filter(|l| {
                l.strip_prefix(start.as_str())
                    .is_some_and(|rest| rest.starts_with([' ', '`']))
            })
            .collect()
    };
    let top = crate::packaging::listed(&[]);
    assert!(top.len() >= 15, "--help lists only {top:?}");
    for name in &top {
        let rows = rows(name);
        assert!(
            !rows.is_empty(),
            "README's table of commands lacks `btrfs-lab {name}`"
        );
        for nested in crate::packaging::listed(&[name]) {
            assert!(
                rows.iter().any(|r| r
                    .split(|c: char| !c.is_ascii_alphanumeric() && c != '-')
                    .any(|w| w == nested)),
                "README's rows for `btrfs-lab {name}` do not name `{nested}`"
            );
        }
    }
}
