//! What the package ships besides the binary, checked through the binary:
//! `btrfs-lab man` pages (one per subcommand, rendered by man(1) without a
//! groff warning) and `btrfs-lab completions` scripts (accepted by their
//! shells, and bash's really completes). No root needed. The static build
//! and the .deb itself are checked by scripts/release.sh and .ci/run.

use std::fs;
use std::path::Path;
use std::process::{Command, Stdio};

use crate::common::{bin, run};

fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "0" && v != "false")
}

/// The program `name`, or None (skipped loudly; in CI a failure).
fn tool(name: &str, test: &str) -> Option<std::path::PathBuf> {
    match which::which(name) {
        Ok(p) => Some(p),
        Err(_) if in_ci() => panic!("CI=true and {name} is missing for {test}"),
        Err(_) => {
            eprintln!("\n*** SKIPPED: {test} needs {name} (scripts/install-deps.sh) ***\n");
            None
        }
    }
}

/// The subcommand names `btrfs-lab [WORDS] --help` lists, `help` left out.
pub(crate) fn listed(words: &[&str]) -> Vec<String> {
    let out = Command::new(bin())
        .args(words)
        .arg("--help")
        .output()
        .unwrap();
    assert!(out.status.success(), "{words:?} --help");
    let help = String::from_utf8_lossy(&out.stdout).into_owned();
    help.lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .filter(|l| !l[2..].starts_with(' '))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|n| *n != "help")
        .map(str::to_owned)
        .collect()
}

/// Every page `man --out-dir` must write, with the words of its command:
/// btrfs-lab.1 and one per subcommand and nested subcommand that `--help`
/// lists.
fn expected_pages() -> Vec<(String, Vec<String>)> {
    let mut pages = vec![("btrfs-lab.1".to_owned(), Vec::new())];
    for name in listed(&[]) {
        pages.push((format!("btrfs-lab-{name}.1"), vec![name.clone()]));
        for nested in listed(&[&name]) {
            pages.push((
                format!("btrfs-lab-{name}-{nested}.1"),
                vec![name.clone(), nested],
            ));
        }
    }
    pages.sort();
    pages
}

fn script(shell: &str) -> String {
    let (code, out, err) = run(Command::new(bin()).args(["completions", shell]));
    assert_eq!(code, 0, "completions {shell}: {err}");
    assert!(err.is_empty(), "{err}");
    out
}

#[test]
fn man_dir_writes_one_page_per_subcommand_that_man_renders() {
    let t = tempfile::tempdir().unwrap();
    let dir = t.path().join("man1");
    let (code, out, err) = run(Command::new(bin()).arg("man").arg("--out-dir").arg(&dir));
    assert_eq!(code, 0, "{err}");
    let mut written: Vec<String> = fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    written.sort();
    let pages = expected_pages();
    let expected: Vec<String> = pages.iter().map(|(f, _)| f.clone()).collect();
    assert!(expected.contains(&"btrfs-lab-sandbox-up.1".to_owned()));
    assert!(expected.contains(&"btrfs-lab-device-add.1".to_owned()));
    assert!(expected.contains(&"btrfs-lab-read-test.1".to_owned()));
    assert_eq!(written, expected, "no temporary file is left either");
    assert_eq!(
        out.lines().count(),
        expected.len(),
        "one line per page: {out}"
    );

    let Some(man) = tool(
        "man",
        "man_dir_writes_one_page_per_subcommand_that_man_renders",
    ) else {
        return;
    };
    for (page, words) in &pages {
        let rendered = Command::new(&man)
            .args(["--warnings", "-l"])
            .arg(dir.join(page))
            .env("MANPAGER", "cat")
            .env("MANWIDTH", "100")
            .env("LC_ALL", "C.UTF-8")
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&rendered.stdout);
        let warnings = String::from_utf8_lossy(&rendered.stderr);
        assert!(rendered.status.success(), "man -l {page}: {warnings}");
        assert!(
            warnings.trim().is_empty(),
            "man -l {page} warns:\n{warnings}"
        );
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
                text.lines().any(|l| l == section),
                "{page} rendered has no {section}:\n{text}"
            );
        }
        let name = page.trim_end_matches(".1");
        assert!(
            text.lines()
                .next()
                .unwrap_or_default()
                .starts_with(&format!("{}(1)", name.to_uppercase())),
            "{page}: {}",
            text.lines().next().unwrap_or_default()
        );
        // Every example is a command line of this page's command.
        let command = std::iter::once("btrfs-lab".to_owned())
            .chain(words.iter().cloned())
            .collect::<Vec<_>>()
            .join(" ");
        let examples: Vec<&str> = text
            .lines()
            .map(str::trim)
            .filter_map(|l| l.strip_prefix("$ "))
            .collect();
        assert!(!examples.is_empty(), "{page}: no example");
        for e in &examples {
            assert!(
                *e == command || e.starts_with(&format!("{command} ")),
                "{page}: example `{e}` is not a `{command}` command line"
            );
        }
    }
}

#[test]
fn man_prints_the_page_it_is_asked_for() {
    for spelling in [
        &["sandbox", "up"][..],
        &["sandbox-up"],
        &["btrfs-lab-sandbox-up.1"],
    ] {
        let (code, out, err) = run(Command::new(bin()).arg("man").args(spelling));
        assert_eq!(code, 0, "{err}");
        assert!(
            out.contains(".TH BTRFS-LAB-SANDBOX-UP 1"),
            "{spelling:?}: {}",
            out.lines().take(5).collect::<Vec<_>>().join("\n")
        );
        assert!(out.contains(".SH \"EXIT STATUS\""), "{out}");
    }
}

#[test]
fn man_and_completions_refuse_json_and_unknown_names_with_one_line() {
    for args in [
        &["man", "nosuch"][..],
        &["--json", "man", "df"],
        &["completions", "tcsh"],
        &["--json", "completions", "bash"],
    ] {
        let (code, out, err) = run(Command::new(bin()).args(args));
        assert_eq!(code, 2, "{args:?}: {err}");
        assert!(out.is_empty(), "{args:?} printed on stdout: {out}");
        let lines: Vec<&str> = err.lines().collect();
        assert!(
            lines.len() <= 2 && lines[0].starts_with("btrfs-lab: error: "),
            "{args:?}: {err}"
        );
    }
}

#[test]
fn completion_scripts_pass_their_shells_syntax_check_and_name_every_subcommand() {
    let t = tempfile::tempdir().unwrap();
    let names = listed(&[]);
    assert!(names.iter().any(|n| n == "probe-dio"), "{names:?}");
    for shell in ["bash", "zsh", "fish"] {
        let text = script(shell);
        for name in &names {
            assert!(text.contains(name.as_str()), "{shell} script lacks {name}");
        }
        let Some(program) = tool(
            shell,
            "completion_scripts_pass_their_shells_syntax_check_and_name_every_subcommand",
        ) else {
            continue;
        };
        let file = t.path().join(format!("btrfs-lab.{shell}"));
        fs::write(&file, &text).unwrap();
        let (code, _, err) = run(Command::new(&program).arg("-n").arg(&file));
        assert_eq!(code, 0, "{shell} -n rejects the script: {err}");
        assert!(err.is_empty(), "{shell} -n: {err}");
        // The check can fail: the script cut in the middle of a block is refused.
        let cut = match shell {
            "fish" => &text[..text.find("\nend\n").expect("a function") + 1],
            _ => &text[..text.find("esac").expect("a case block") + 2],
        };
        let broken = t.path().join(format!("broken.{shell}"));
        fs::write(&broken, cut).unwrap();
        let (code, _, _) = run(Command::new(&program).arg("-n").arg(&broken));
        assert_ne!(code, 0, "{shell} -n accepts a cut script");
    }
}

/// Sources the bash script and asks its completion function, as bash does
/// on TAB, for `words` with the cursor on the last one.
fn bash_complete(file: &Path, words: &[&str]) -> Vec<String> {
    let program = r#"
source "$1"; shift
spec=$(complete -p btrfs-lab) || exit 3
f=$(sed -n 's/.*-F \([^ ]*\).*/\1/p' <<<"$spec")
COMP_WORDS=("$@"); COMP_CWORD=$(($# - 1))
COMP_LINE="$*"; COMP_POINT=${#COMP_LINE}
prev=""; [ $# -ge 2 ] && prev=${COMP_WORDS[COMP_CWORD-1]}
"$f" btrfs-lab "${COMP_WORDS[COMP_CWORD]}" "$prev"
printf '%s\n' "${COMPREPLY[@]}"
"#;
    let (code, stdout, stderr) = run(Command::new("bash")
        .args(["-c", program, "complete"])
        .arg(file)
        .args(words));
    assert_eq!(code, 0, "{stderr}");
    stdout
        .lines()
        .filter(|l| !l.is_empty())
        .map(str::to_owned)
        .collect()
}

#[test]
fn bash_completion_completes_nested_subcommands_and_their_flags() {
    let t = tempfile::tempdir().unwrap();
    let file = t.path().join("btrfs-lab.bash");
    fs::write(&file, script("bash")).unwrap();
    assert_eq!(bash_complete(&file, &["btrfs-lab", "sandb"]), ["sandbox"]);
    // These two completed nothing with clap_complete's script for a
    // hyphenated program name (clap-rs/clap#6421).
    assert_eq!(bash_complete(&file, &["btrfs-lab", "sandbox", "u"]), ["up"]);
    assert_eq!(
        bash_complete(&file, &["btrfs-lab", "df", "--pars"]),
        ["--parse"]
    );
    assert_eq!(
        bash_complete(&file, &["btrfs-lab", "sandbox", "up", "--dat"]),
        ["--data"]
    );
    let shells = bash_complete(&file, &["btrfs-lab", "completions", ""]);
    for s in ["bash", "zsh", "fish"] {
        assert!(shells.iter().any(|x| x == s), "{shells:?}");
    }
    // The values users type most: profile names, not file names.
    for words in [
        &["btrfs-lab", "convert", "/mnt", "--data", "raid1"][..],
        &["btrfs-lab", "convert", "/mnt", "--metadata", "raid1"],
        &["btrfs-lab", "sandbox", "up", "--data", "raid1"],
        &[
            "btrfs-lab",
            "device",
            "add",
            "/mnt",
            "/dev/x",
            "--then-convert",
            "--data",
            "raid1",
        ],
    ] {
        assert_eq!(
            bash_complete(&file, words),
            ["raid1", "raid1c3", "raid1c4", "raid10"],
            "{words:?}"
        );
    }
    assert_eq!(
        bash_complete(&file, &["btrfs-lab", "convert", "/mnt", "--data", ""]).len(),
        9
    );
    assert_eq!(
        bash_complete(&file, &["btrfs-lab", "bench", "/mnt", "--profile", ""]),
        ["default", "nvme", "peak", "real-world"]
    );
    assert_eq!(
        bash_complete(&file, &["btrfs-lab", "nocow", "/srv/db", "--for", "p"]),
        ["postgres"]
    );
}

#[test]
fn fish_completion_completes_nested_subcommands_and_their_flags() {
    let Some(fish) = tool(
        "fish",
        "fish_completion_completes_nested_subcommands_and_their_flags",
    ) else {
        return;
    };
    let t = tempfile::tempdir().unwrap();
    let file = t.path().join("btrfs-lab.fish");
    fs::write(&file, script("fish")).unwrap();
    let complete = |line: &str| -> Vec<String> {
        let (code, stdout, stderr) = run(Command::new(&fish)
            .arg("--no-config")
            .arg("-c")
            .arg(format!("source {}; complete -C '{line}'", file.display())));
        assert_eq!(code, 0, "{stderr}");
        stdout
            .lines()
            .map(|l| l.split('\t').next().unwrap_or_default().to_owned())
            .collect()
    };
    assert_eq!(complete("btrfs-lab sandbox u"), ["up"]);
    assert_eq!(complete("btrfs-lab df --pars"), ["--parse"]);
    // clap_complete's fish script offered file names for a positional
    // argument with fixed values; ours adds the values.
    let shells = complete("btrfs-lab completions ");
    for s in ["bash", "zsh", "fish", "elvish", "powershell"] {
        assert!(shells.iter().any(|x| x == s), "{shells:?}");
    }
    assert_eq!(complete("btrfs-lab completions fi"), ["fish"]);
    assert!(complete("btrfs-lab completions fish ").is_empty());
    assert_eq!(
        complete("btrfs-lab convert /mnt --data raid1c"),
        ["raid1c3", "raid1c4"]
    );
    assert_eq!(
        complete("btrfs-lab bench /mnt --profile "),
        ["default", "nvme", "peak", "real-world"]
    );
    assert_eq!(complete("btrfs-lab nocow /srv --for po"), ["postgres"]);
}

#[test]
fn zsh_completion_completes_nested_subcommands_and_their_flags() {
    let Some(zsh) = tool(
        "zsh",
        "zsh_completion_completes_nested_subcommands_and_their_flags",
    ) else {
        return;
    };
    let t = tempfile::tempdir().unwrap();
    fs::write(t.path().join("_btrfs-lab"), script("zsh")).unwrap();
    // A real interactive zsh on a pseudo-terminal (zsh/zpty) with compinit
    // and the script on $fpath: type WORDS, press Tab, then Enter; a
    // function standing in for btrfs-lab prints the completed line. The
    // pty queues the keys, so no waiting is needed; `timeout` bounds a hang.
    const PROGRAM: &str = r#"
zmodload zsh/zpty
zpty z zsh -f -i
zpty -w z 'PS1=""; fpath=('"$1"' $fpath); autoload -U compinit; compinit -u -D; btrfs-lab() { print -r -- "RES""ULT<$*>" }'
zpty -w z "$2"$'\t'
zpty -w z ''
zpty -r z out '*RESULT<*>'
print -r -- "${${out##*RESULT<}%%>*}"
zpty -d z
"#;
    let complete = |line: &str| -> String {
        let (code, stdout, stderr) = run(Command::new("timeout")
            .arg("60")
            .arg(&zsh)
            .args(["-f", "-c", PROGRAM, "zsh"])
            .arg(t.path())
            .arg(line));
        assert_eq!(code, 0, "{line}: {stderr}");
        stdout.trim_end().to_owned()
    };
    assert_eq!(complete("btrfs-lab sandb"), "sandbox");
    assert_eq!(complete("btrfs-lab sandbox u"), "sandbox up");
    assert_eq!(complete("btrfs-lab df --pars"), "df --parse");
    assert_eq!(complete("btrfs-lab sandbox up --dat"), "sandbox up --data");
    assert_eq!(complete("btrfs-lab completions fi"), "completions fish");
    assert_eq!(
        complete("btrfs-lab convert /mnt --data raid0 --metadata si"),
        "convert /mnt --data raid0 --metadata single"
    );
    assert_eq!(
        complete("btrfs-lab bench /mnt --profile nv"),
        "bench /mnt --profile nvme"
    );
    // Ambiguous: nothing is completed.
    assert_eq!(complete("btrfs-lab s"), "s");
}

#[test]
fn man_on_a_terminal_is_formatted_and_paged_piped_it_is_roff() {
    let test = "man_on_a_terminal_is_formatted_and_paged_piped_it_is_roff";
    let (Some(script), Some(_man)) = (tool("script", test), tool("man", test)) else {
        return;
    };
    // util-linux script(1) gives the command a pseudo-terminal; MANPAGER=cat
    // stands for the user's pager.
    let (code, stdout, stderr) = run(Command::new(script)
        .args(["-qec"])
        .arg(format!("{} man df", bin().display()))
        .arg("/dev/null")
        .env("MANPAGER", "cat")
        .env("TERM", "dumb")
        .env("MANWIDTH", "80"));
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.contains("BTRFS-LAB-DF(1)"), "{stdout}");
    assert!(!stdout.contains(".TH "), "raw roff on a terminal: {stdout}");
    let (code, stdout, _) = run(Command::new(bin()).args(["man", "df"]));
    assert_eq!(code, 0);
    assert!(stdout.contains(".TH BTRFS-LAB-DF 1"), "{stdout}");
}

#[test]
fn man_on_a_terminal_without_man_is_roff_with_a_note() {
    let test = "man_on_a_terminal_without_man_is_roff_with_a_note";
    let Some(script) = tool("script", test) else {
        return;
    };
    // Tools are also looked for in the sbin directories (where a merged
    // /usr may put man): only without one there.
    let sbin = ["/usr/local/sbin/man", "/usr/sbin/man", "/sbin/man"];
    if sbin.iter().any(|p| std::path::Path::new(p).exists()) {
        return;
    }
    let (code, stdout, stderr) = run(Command::new(script)
        .args(["-qec"])
        .arg(format!("{} man df", bin().display()))
        .arg("/dev/null")
        .env("PATH", "/nonexistent")
        .env("TERM", "dumb"));
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.contains("man(1) is not installed"), "{stdout}");
    assert!(stdout.contains(".TH BTRFS-LAB-DF 1"), "{stdout}");
}
