//! The command line as a whole (issue 16): walks every subcommand's
//! `--help` from `btrfs-lab --help` down and checks that each flag name has
//! one meaning, the global options are shown once, every description is
//! complete and fits 80 columns, `--help` works everywhere and `-h` is the
//! help where it is not btrfs-progs' `--human-readable`. Then `--quiet` on a few commands. No root needed: nothing here runs
//! an operation.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use crate::common::{bin, run};

const GLOBALS: [&str; 5] = [
    "--json",
    "--quiet",
    "--color",
    "--state-dir",
    "--sandbox-root",
];

/// Flag names that may carry two texts, and why (the meaning is the same).
const SAME_NAME_OTHER_TEXT: [(&str, &str); 8] = [
    (
        "--status",
        "shows where the command's operation stands and exits; scrub's also names a scrub btrfs scrub start began",
    ),
    (
        "--cancel",
        "cancels the command's running operation, what is done stays done; scrub's text says what that is for a scrub",
    ),
    (
        "--resume",
        "continues the command's interrupted operation; scrub's names where its state is kept",
    ),
    (
        "--drop-caches",
        "drops the whole machine's caches (drop_caches, root) in both: read-test before each run, bench --small-files before its stat phase",
    ),
    (
        "--pid",
        "watch a running process instead of running a test: probe-dio its writes, read-test its reads",
    ),
    (
        "--threads",
        "the number of I/O threads in both; read-test also takes a list to sweep",
    ),
    (
        "--all",
        "every one of what the command acts on: sandbox down every sandbox of the user, scrub every mounted filesystem once",
    ),
    (
        "--parse",
        "parses the captured output of the btrfs-progs command of the same name, which the text names",
    ),
];

fn help_of(path: &[&str], columns: &str) -> String {
    let mut c = Command::new(bin());
    c.args(path).arg("--help").env("COLUMNS", columns);
    let (code, stdout, stderr) = run(&mut c);
    assert_eq!(code, 0, "{path:?} --help: {stderr}");
    assert!(
        stderr.is_empty(),
        "{path:?} --help wrote to stderr: {stderr}"
    );
    assert!(!stdout.trim().is_empty(), "{path:?} --help is empty");
    stdout
}

/// The entries of the "Commands:" section: name and one-line description.
fn commands(help: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut inside = false;
    for line in help.lines() {
        if line == "Commands:" {
            inside = true;
            continue;
        }
        if inside {
            if !line.starts_with("  ") {
                break;
            }
            let t = line.trim();
            let wrapped = line.starts_with("   ");
            if !wrapped && let Some((name, desc)) = t.split_once(char::is_whitespace) {
                out.push((name.to_owned(), desc.trim().to_owned()));
            } else {
                // A description wrapped onto the next line.
                let last: &mut (String, String) = out.last_mut().expect("a command first");
                last.1.push(' ');
                last.1.push_str(t);
            }
        }
    }
    out
}

/// One option as its help shows it.
#[derive(Debug)]
struct Opt {
    /// `--name` (or `-X` for a short-only option).
    name: String,
    /// The description, wrapped lines joined, without `[default: ...]`,
    /// `[possible values: ...]` and the possible-values list.
    text: String,
}

fn is_flag_line(line: &str) -> bool {
    let t = line.trim_start();
    let indent = line.len() - t.len();
    (2..=6).contains(&indent) && t.starts_with('-')
}

/// Every option of a help text (any heading).
fn options(help: &str) -> Vec<Opt> {
    let mut opts: Vec<Opt> = Vec::new();
    let mut paragraphs: Vec<String> = Vec::new();
    let mut current: Option<String> = None;
    let finish = |opts: &mut Vec<Opt>, name: Option<String>, paragraphs: &mut Vec<String>| {
        if let Some(name) = name {
            let kept: Vec<String> = paragraphs
                .drain(..)
                .filter(|p| {
                    !p.starts_with("[default:")
                        && !p.starts_with("[possible values:")
                        && !p.starts_with("Possible values:")
                        && !p.starts_with("- ")
                })
                .collect();
            opts.push(Opt {
                name,
                text: kept.join(" "),
            });
        }
        paragraphs.clear();
    };
    let mut blank = true;
    for line in help.lines() {
        if line.starts_with("Size units (") {
            // The unit table after the options (checked on its own).
            break;
        }
        if is_flag_line(line) {
            finish(&mut opts, current.take(), &mut paragraphs);
            let t = line.trim();
            let first = t.split_whitespace().collect::<Vec<_>>();
            // "-b, --raw", "--file-size <SIZE>", "-H".
            let long = first.iter().find(|w| w.starts_with("--"));
            let name = long.unwrap_or(&first[0]).trim_end_matches(',').to_owned();
            current = Some(name);
            blank = true;
            continue;
        }
        if current.is_none() {
            continue;
        }
        if !line.starts_with(' ') && !line.is_empty() {
            // A heading or the text after the options.
            finish(&mut opts, current.take(), &mut paragraphs);
            continue;
        }
        let t = line.trim();
        if t.is_empty() {
            blank = true;
            continue;
        }
        if blank || t.starts_with("- ") {
            paragraphs.push(t.to_owned());
        } else {
            let p = paragraphs.last_mut().expect("a paragraph");
            p.push(' ');
            p.push_str(t);
        }
        blank = false;
    }
    finish(&mut opts, current.take(), &mut paragraphs);
    opts
}

/// What a description means, for comparing two flags of the same name:
/// without a `With --x:` condition, `[default: ...]`, the final period and
/// the case of the first letter.
fn meaning(text: &str) -> String {
    let mut t = text.trim();
    while let Some(rest) = t.strip_prefix("With --") {
        t = rest.split_once(": ").map_or(rest, |(_, r)| r);
    }
    let t = match t.find(" [default:") {
        Some(i) => &t[..i],
        None => t,
    };
    let t = t.trim_end_matches('.');
    let mut c = t.chars();
    c.next()
        .map(|f| f.to_lowercase().chain(c).collect())
        .unwrap_or_default()
}

/// Why a description looks cut off mid-sentence, if it does.
fn incomplete(text: &str) -> Option<String> {
    let t = text.trim();
    if t.is_empty() {
        return Some("empty".into());
    }
    let t = match t.find(" [default:") {
        Some(i) => &t[..i],
        None => t,
    };
    if t.ends_with([',', ';', ':', '-', '(', '/']) {
        return Some(format!("ends with '{}'", t.chars().last().unwrap()));
    }
    let last = t
        .trim_end_matches(['.', ')'])
        .rsplit(char::is_whitespace)
        .next()
        .unwrap_or("")
        .to_lowercase();
    const DANGLING: [&str; 24] = [
        "a", "an", "the", "and", "or", "of", "to", "with", "for", "in", "on", "by", "its", "their",
        "from", "at", "as", "than", "that", "which", "is", "are", "but", "nor",
    ];
    if DANGLING.contains(&last.as_str()) {
        return Some(format!("ends with '{last}'"));
    }
    if last.ends_with("'s") && t.ends_with(last.as_str()) {
        return Some(format!("ends with a possessive ('{last}') and no noun"));
    }
    for (open, close) in [('(', ')'), ('[', ']')] {
        if t.matches(open).count() != t.matches(close).count() {
            return Some(format!("unbalanced {open}{close}"));
        }
    }
    if t.matches('`').count() % 2 != 0 {
        return Some("unbalanced `".into());
    }
    None
}

#[test]
fn the_incompleteness_check_catches_what_issue_16_found() {
    // links' one-line description before the fix, as clap showed it.
    assert!(
        incomplete(
            "PCIe links of the NVMe drives up to the root port, their ceilings, and an array's"
        )
        .is_some()
    );
    assert!(incomplete("Directory for the backing files and the").is_some());
    assert!(incomplete("Bytes per write call (see").is_some());
    assert!(incomplete("Show the plan and do nothing").is_none());
    assert!(incomplete("Rounds (the medians decide)").is_none());
    assert_eq!(
        meaning("With --then-convert: data profile: x."),
        "data profile: x"
    );
    assert_eq!(
        meaning("Data profile: x [default: mkfs]"),
        "data profile: x"
    );
}

/// Every command path, depth first from the top-level help.
fn all_commands() -> Vec<Vec<String>> {
    let mut out = Vec::new();
    let mut todo: Vec<Vec<String>> = vec![vec![]];
    while let Some(path) = todo.pop() {
        let p: Vec<&str> = path.iter().map(String::as_str).collect();
        let help = help_of(&p, "80");
        for (name, _) in commands(&help) {
            if name != "help" {
                let mut sub = path.clone();
                sub.push(name);
                todo.push(sub);
            }
        }
        out.push(path);
    }
    out
}

#[test]
fn every_help_is_complete_consistent_and_fits_80_columns() {
    let paths = all_commands();
    assert!(
        paths.len() >= 16,
        "only {} commands found: {paths:?}",
        paths.len()
    );
    let mut meanings: BTreeMap<String, BTreeMap<String, Vec<String>>> = BTreeMap::new();
    let mut problems = Vec::new();
    for path in &paths {
        let p: Vec<&str> = path.iter().map(String::as_str).collect();
        let where_ = format!("btrfs-lab {}", p.join(" "));
        let help = help_of(&p, "80");
        for (n, line) in help.lines().enumerate() {
            if line.chars().count() > 80 {
                problems.push(format!(
                    "{where_} --help line {} is wider than 80: {line}",
                    n + 1
                ));
            }
        }
        // A command list is read down its first column: an entry never
        // wraps (at 80 columns, nor at 100, where clap stops widening).
        for columns in ["80", "100"] {
            let help = help_of(&p, columns);
            let mut inside = false;
            for line in help.lines() {
                if line == "Commands:" {
                    inside = true;
                } else if inside && !line.starts_with("  ") {
                    inside = false;
                } else if inside && line.starts_with("   ") {
                    problems.push(format!(
                        "{where_} --help at {columns} columns wraps a command's line: {line:?}"
                    ));
                }
            }
        }
        for (name, desc) in commands(&help) {
            if name == "help" {
                continue;
            }
            if let Some(why) = incomplete(&desc) {
                problems.push(format!(
                    "{where_}: command {name}'s description {why}: {desc}"
                ));
            }
        }
        let opts = options(&help);
        assert!(
            opts.iter().any(|o| o.name == "--help"),
            "{where_} shows no --help"
        );
        for o in &opts {
            if let Some(why) = incomplete(&o.text) {
                problems.push(format!(
                    "{where_} {}: description {why}: {}",
                    o.name, o.text
                ));
            }
            if o.name == "-h" {
                problems.push(format!("{where_}: -h without a long name"));
            }
            meanings
                .entry(o.name.clone())
                .or_default()
                .entry(meaning(&o.text))
                .or_default()
                .push(where_.clone());
        }
        // -h is human-readable where the command prints sizes, else help.
        for line in help.lines().filter(|l| l.trim_start().starts_with("-h")) {
            if !line.trim().starts_with("-h, --human-readable") && line.trim() != "-h, --help" {
                problems.push(format!("{where_}: -h shown as {line}"));
            }
        }
        if p.is_empty() {
            // The global options, once, under their heading.
            let heading = help
                .find("Global options")
                .expect("top-level help has a Global options heading");
            for g in GLOBALS {
                let at = help
                    .lines()
                    .position(|l| is_flag_line(l) && l.contains(g))
                    .unwrap_or_else(|| panic!("top-level help lacks {g}"));
                let offset: usize = help.lines().take(at).map(|l| l.len() + 1).sum();
                assert!(offset > heading, "{g} is not under Global options");
            }
            let color_lines = help
                .lines()
                .skip_while(|l| !l.contains("--color"))
                .skip(1)
                .take_while(|l| !l.trim().is_empty())
                .count();
            assert_eq!(color_lines, 1, "--color takes {color_lines} lines:\n{help}");
        } else {
            for g in GLOBALS {
                if opts.iter().any(|o| o.name == g) {
                    problems.push(format!("{where_} repeats the global option {g}"));
                }
            }
            let last = help.trim_end().lines().last().unwrap_or("");
            if !last.starts_with("See btrfs-lab --help for the global options") {
                problems.push(format!(
                    "{where_} does not end pointing to the global options: {last}"
                ));
            }
        }
    }
    for (name, texts) in &meanings {
        if texts.len() > 1 && !SAME_NAME_OTHER_TEXT.iter().any(|(n, _)| n == name) {
            problems.push(format!("{name} has {} meanings: {texts:#?}", texts.len()));
        }
    }
    for (name, _) in SAME_NAME_OTHER_TEXT {
        assert!(
            meanings.get(name).is_some_and(|t| t.len() > 1),
            "{name} is allow-listed but has one text: drop it from the list"
        );
    }
    // The flags the issue named: one meaning each now.
    for name in [
        "--file-size",
        "--data",
        "--metadata",
        "--yes",
        "--dry-run",
        "--rounds",
        "--sysroot",
    ] {
        let texts = &meanings[name];
        assert_eq!(texts.len(), 1, "{name}: {texts:#?}");
    }
    for name in ["--size", "--force", "--runs"] {
        assert!(
            !meanings.contains_key(name),
            "{name} is still shown: {:?}",
            meanings[name]
        );
    }
    // The unit flags are on every command that prints sizes: parsed, and
    // summed up once at the end of its help (not thirty lines of options).
    for cmd in [
        "df",
        "usage",
        "show",
        "sandbox up",
        "sandbox list",
        "device add",
        "convert",
        "reclaim",
        "scrub",
        "nocow",
        "probe-dio",
        "read-test",
        "bench",
        "demo",
    ] {
        let w = format!("btrfs-lab {cmd}");
        let path: Vec<&str> = cmd.split(' ').collect();
        let help = help_of(&path, "80");
        let block = help
            .find("Size units (text output; JSON is always in bytes), as btrfs-progs takes them:")
            .unwrap_or_else(|| panic!("{w}: no unit table:\n{help}"));
        let table: Vec<&str> = help[block..].lines().skip(1).take(4).collect();
        for flag in [
            "-b, --raw",
            "-h, --human-readable",
            "-H",
            "--iec, --si",
            "-k, -m, -g, -t",
        ] {
            assert!(
                table.iter().any(|l| l.contains(flag)),
                "{w}: the unit table lacks {flag}:\n{help}"
            );
        }
        for flag in ["--raw", "--human-readable", "--iec"] {
            assert_eq!(
                help.matches(flag).count(),
                1,
                "{w} lists {flag} outside the unit table:\n{help}"
            );
        }
        assert!(!help.contains("--tbytes"), "{w}:\n{help}");
        // Hidden from --help, not from the parser: `-b` is still taken.
        let mut args = path.clone();
        args.extend(["-b", "--si", "--help"]);
        let (code, _, stderr) =
            crate::common::run(std::process::Command::new(crate::common::bin()).args(&args));
        assert_eq!(code, 0, "{w} -b --si --help: {stderr}");
    }
    assert!(
        problems.is_empty(),
        "{} problems:\n{}",
        problems.len(),
        problems.join("\n")
    );
}

/// `-h` is the help (the same text as `--help`) wherever it is not
/// btrfs-progs' `--human-readable`; where it is, it never prints help: a
/// line with it and a bad option is refused and runs nothing.
#[test]
fn dash_h_is_help_where_it_is_not_human_readable() {
    let mut helped = 0;
    for path in all_commands() {
        let p: Vec<&str> = path.iter().map(String::as_str).collect();
        let help = help_of(&p, "80");
        let units = help.contains("-h, --human-readable");
        if units {
            let mut c = Command::new(bin());
            c.args(&p).args(["-h", "--no-such-option-xyz"]);
            let (code, stdout, stderr) = run(&mut c);
            assert_eq!(code, 2, "{p:?} -h: {stdout}{stderr}");
            assert!(stdout.is_empty(), "{p:?} -h printed: {stdout}");
            assert!(stderr.starts_with("btrfs-lab: error: "), "{p:?}: {stderr}");
        } else {
            assert!(
                help.contains("-h, --help"),
                "{p:?} --help shows no -h:\n{help}"
            );
            let mut c = Command::new(bin());
            c.args(&p).arg("-h").env("COLUMNS", "80");
            let (code, stdout, stderr) = run(&mut c);
            assert_eq!(code, 0, "{p:?} -h: {stderr}");
            assert_eq!(stdout, help, "{p:?} -h differs from --help");
            helped += 1;
        }
    }
    // The top level, links, doctor, sandbox, device, man, completions, ...
    assert!(helped >= 8, "-h is help on only {helped} commands");
    // Where -h is a unit flag, a line it leaves incomplete says where help is.
    let (code, stdout, stderr) = run(Command::new(bin()).args(["df", "-h"]));
    assert_eq!(code, 2, "{stdout}{stderr}");
    assert!(
        stderr.contains("-h is --human-readable here, as in btrfs-progs; help is --help"),
        "{stderr}"
    );
}

#[test]
fn usage_lines_say_what_is_required() {
    let (code, stdout, stderr) = run(Command::new(bin()).arg("df"));
    assert_eq!(code, 2, "{stdout}{stderr}");
    assert!(stderr.contains("required"), "{stderr}");
    for (cmd, usage) in [
        (
            "df",
            "btrfs-lab df [OPTIONS] <MOUNT>\n       btrfs-lab df --parse [OPTIONS] [FILE]",
        ),
        (
            "usage",
            "btrfs-lab usage [OPTIONS] <MOUNT>\n       btrfs-lab usage --parse [OPTIONS] [FILE]",
        ),
        ("bench", "btrfs-lab bench [OPTIONS] <DIR>\n"),
        ("probe-dio", "btrfs-lab probe-dio [OPTIONS] <PATH>\n"),
    ] {
        let help = help_of(&[cmd], "80");
        assert!(help.contains(&format!("Usage: {usage}")), "{cmd}:\n{help}");
    }
}

fn fixture(name: &str) -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("subcommands")
        .join(name)
}

#[test]
fn quiet_prints_only_errors_and_keeps_the_status() {
    let ticket = fixture("df.in/ticket.txt");
    // Text: nothing on stdout or stderr, same status.
    let (loud, out, _) = run(Command::new(bin()).args(["df", "--parse"]).arg(&ticket));
    assert_eq!(loud, 0);
    assert!(out.contains("Data, single: total=1.94GiB"), "{out}");
    for q in ["-q", "--quiet"] {
        let (code, stdout, stderr) =
            run(Command::new(bin()).args(["df", "--parse", q]).arg(&ticket));
        assert_eq!(code, 0, "{stderr}");
        assert_eq!(stdout, "", "df --parse {q}");
        assert_eq!(stderr, "", "df --parse {q}");
    }
    // Global: accepted before the subcommand too.
    let (code, stdout, _) = run(Command::new(bin())
        .args(["-q", "usage", "--parse"])
        .arg(fixture("usage.in/bees.txt")));
    let (loud, loud_out, _) = run(Command::new(bin())
        .args(["usage", "--parse"])
        .arg(fixture("usage.in/bees.txt")));
    assert_eq!((code, loud), (0, 0), "{loud_out}");
    assert!(!loud_out.is_empty());
    assert_eq!(stdout, "");
    // --json still goes out with --quiet.
    let (code, stdout, _) = run(Command::new(bin())
        .args(["df", "--parse", "-q", "--json"])
        .arg(&ticket));
    assert_eq!(code, 0);
    let v: serde_json::Value = serde_json::from_str(&stdout).expect("JSON with --quiet");
    assert!(v.to_string().contains("1000"), "{v}");
    // Errors still go out, with their status.
    let (code, stdout, stderr) =
        run(Command::new(bin()).args(["df", "-q", "/nonexistent/btrfs-lab"]));
    assert_eq!(code, 1, "{stderr}");
    assert_eq!(stdout, "");
    assert!(stderr.starts_with("btrfs-lab: error: "), "{stderr}");
    // A non-zero result status is kept: doctor on a non-btrfs path.
    let (loud, _, _) = run(Command::new(bin()).args(["doctor", "/proc"]));
    let (code, stdout, stderr) = run(Command::new(bin()).args(["doctor", "-q", "/proc"]));
    assert_eq!(code, loud, "{stderr}");
    assert_ne!(code, 0);
    assert_eq!(stdout, "");
}

#[test]
#[cfg_attr(root_tests_ignored, ignore = "needs root (scripts/test.sh)")]
fn quiet_on_commands_that_change_and_measure() {
    if !crate::common::require_root("--quiet on sandbox up/down, usage -T, probe-dio") {
        return;
    }
    let env = crate::common::TestEnv::new();
    // sandbox up: nothing printed (not even the deprecated --yes note), the
    // sandbox is there.
    let (code, stdout, stderr) = run(env.cmd().args([
        "sandbox",
        "up",
        "-q",
        "--yes",
        "--name",
        "quiet",
        "--devices",
        "2",
        "--device-size",
        "512M",
    ]));
    assert_eq!((code, stdout.as_str(), stderr.as_str()), (0, "", ""));
    let (_, list, _) = run(env.cmd().args(["sandbox", "list", "--json"]));
    let list = crate::common::json(&list);
    let mnt = list["sandboxes"][0]["mount_point"]
        .as_str()
        .expect("the quiet sandbox is listed")
        .to_owned();
    // usage -T: text without -q, nothing with it; the JSON stays.
    let (code, loud, _) = run(env.cmd().args(["usage", "-T", &mnt]));
    assert_eq!(code, 0);
    assert!(loud.contains("Unallocated Total"), "{loud}");
    let (code, stdout, stderr) = run(env.cmd().args(["usage", "-T", "-q", &mnt]));
    assert_eq!((code, stdout.as_str(), stderr.as_str()), (0, "", ""));
    let (code, stdout, _) = run(env.cmd().args(["usage", "-q", "--json", &mnt]));
    assert_eq!(code, 0);
    assert_eq!(
        crate::common::json(&stdout)["devices"]
            .as_array()
            .map(Vec::len),
        Some(2)
    );
    // probe-dio's verdict is its exit status: the same with -q, stdout empty.
    let (loud, _, _) =
        run(env
            .cmd()
            .args(["probe-dio", "--file-size", "16M", "--rounds", "1", &mnt]));
    let (code, stdout, stderr) = run(env.cmd().args([
        "probe-dio",
        "-q",
        "--file-size",
        "16M",
        "--rounds",
        "1",
        &mnt,
    ]));
    assert_eq!(code, loud, "{stderr}");
    assert_eq!(stdout, "");
    // A confirmation under --quiet is refused (nothing removed); --yes goes.
    let (code, stdout, stderr) = run(env.cmd().args(["sandbox", "down", "-q", "quiet"]));
    assert_eq!(code, 1, "{stdout}{stderr}");
    assert!(stderr.contains("--quiet"), "{stderr}");
    assert!(Path::new(&mnt).exists());
    let (code, stdout, stderr) = run(env.cmd().args(["sandbox", "down", "-q", "--yes", "quiet"]));
    assert_eq!((code, stdout.as_str(), stderr.as_str()), (0, "", ""));
    let (_, list, _) = run(env.cmd().args(["sandbox", "list", "--json"]));
    assert_eq!(
        crate::common::json(&list)["sandboxes"]
            .as_array()
            .map(Vec::len),
        Some(0)
    );
}

/// A near miss gets what clap knows on the one line and its hint: the
/// accepted values, and "did you mean" for a value, subcommand or flag.
#[test]
fn near_misses_name_the_accepted_values_and_the_likely_one() {
    for (args, line, hint) in [
        (
            &["completions", "fsh"][..],
            "btrfs-lab: error: invalid value 'fsh' for '<SHELL>' (one of: bash, elvish, fish, powershell, zsh)",
            "hint: did you mean 'fish'? ",
        ),
        (
            &["sandbox", "upp"][..],
            "btrfs-lab: error: unrecognized subcommand 'upp'",
            "hint: did you mean 'up'? usage: btrfs-lab sandbox <COMMAND> (see --help)",
        ),
        (
            &["df", "--jsn", "/"][..],
            "btrfs-lab: error: unexpected argument '--jsn' found",
            "hint: did you mean '--json'? usage: btrfs-lab df [OPTIONS] <MOUNT> (see --help)",
        ),
        (
            &["read-test", "--cache", "lukewarm", "/x"][..],
            "btrfs-lab: error: invalid value 'lukewarm' for '--cache <WHICH>' (one of: cold, warm, both)",
            "hint: ",
        ),
    ] {
        let (code, stdout, stderr) = run(Command::new(bin()).args(args).env("NO_COLOR", "1"));
        assert_eq!(code, 2, "{args:?}: {stderr}");
        assert!(stdout.is_empty(), "{args:?}: {stdout}");
        let lines: Vec<&str> = stderr.lines().collect();
        assert_eq!(lines.len(), 2, "{args:?}: {stderr}");
        assert_eq!(lines[0], line, "{args:?}");
        assert!(lines[1].starts_with(hint), "{args:?}: {}", lines[1]);
    }
}

/// An empty device name (an unset shell variable) is a usage error in one
/// line, before anything is opened, for every device command.
#[test]
fn an_empty_device_name_is_a_usage_error() {
    for args in [
        &["device", "replace", "/", "1", ""][..],
        &["device", "replace", "/", "", "/dev/null"],
        &["device", "remove", "/", ""],
        &["device", "add", "/", ""],
    ] {
        let (code, stdout, stderr) = run(Command::new(bin()).args(args));
        assert_eq!(code, 2, "{args:?}: {stdout}{stderr}");
        assert!(stdout.is_empty(), "{args:?}: {stdout}");
        assert!(
            stderr.contains("an empty name is not a device"),
            "{args:?}: {stderr}"
        );
        assert_eq!(stderr.lines().count(), 2, "{args:?}: {stderr}");
    }
}
