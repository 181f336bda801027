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

/// docs/architecture.md draws the tree as it is: every top-level module it
/// names (`src/NAME/` or `src/NAME.rs` at the start of a line of its map,
/// and the rooms of `src/sys/`) exists, and every top-level module of `src/`
/// and every room of `src/sys/` is in the map.
#[test]
fn architecture_map_names_the_modules_that_exist() {
    let doc = read("docs/architecture.md");
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let map: Vec<&str> = doc
        .split("```")
        .nth(1)
        .expect("docs/architecture.md has no map in a ``` block")
        .lines()
        .collect();
    let mut named = std::collections::BTreeSet::new();
    let mut rooms = std::collections::BTreeSet::new();
    let mut in_sys = false;
    for line in &map {
        if let Some(rest) = line.strip_prefix("src/") {
            let word = rest.split_whitespace().next().unwrap_or("");
            in_sys = word == "sys/";
            if word.contains('<') {
                continue; // src/<job>/: the jobs are listed below it
            }
            named.insert(
                word.trim_end_matches('/')
                    .trim_end_matches(".rs")
                    .to_string(),
            );
            let p = root.join("src").join(word);
            assert!(
                p.exists(),
                "docs/architecture.md names src/{word}, which does not exist"
            );
        } else if let Some(rest) = line.strip_prefix("  ") {
            let first = rest.split_whitespace().next().unwrap_or("");
            if rest.starts_with(' ') || first.is_empty() {
                continue;
            }
            // The jobs listed under src/<job>/ and the rooms under src/sys/.
            for word in rest.split_whitespace().take_while(|w| w.ends_with('/')) {
                let name = word.trim_end_matches('/');
                if in_sys {
                    assert!(
                        root.join("src/sys").join(name).is_dir(),
                        "docs/architecture.md names the room src/sys/{word}, which does not exist"
                    );
                    rooms.insert(name.to_string());
                } else {
                    assert!(
                        root.join("src").join(name).is_dir(),
                        "docs/architecture.md names the job src/{word}, which does not exist"
                    );
                    named.insert(name.to_string());
                }
            }
        }
    }
    for entry in std::fs::read_dir(root.join("src")).unwrap() {
        let entry = entry.unwrap();
        let name = entry.file_name().into_string().unwrap();
        let module = name.trim_end_matches(".rs");
        assert!(
            named.contains(module),
            "src/{name} is not in docs/architecture.md's map"
        );
    }
    for entry in std::fs::read_dir(root.join("src/sys")).unwrap() {
        let entry = entry.unwrap();
        if entry.file_type().unwrap().is_dir() {
            let name = entry.file_name().into_string().unwrap();
            assert!(
                rooms.contains(&name),
                "src/sys/{name}/ is not in docs/architecture.md's map"
            );
        }
    }
}
