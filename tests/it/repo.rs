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
