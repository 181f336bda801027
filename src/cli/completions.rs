//! `btrfs-lab completions SHELL`: the shell completion script, generated at
//! run time from the clap definition (clap_complete), so it completes the
//! subcommands and flags this binary has.

use clap::Args;
use clap_complete::Shell;

use btrfs_lab::error::{Error, Result, exit};

use super::output::Output;

#[derive(Debug, Args)]
pub struct CompletionsArgs {
    /// The shell to print the completion script for.
    #[arg(value_enum, value_name = "SHELL")]
    shell: Shell,
}

/// The completion script for `shell`.
pub fn script(shell: Shell) -> String {
    let mut cmd = super::command();
    let mut buf = Vec::new();
    if shell == Shell::Bash {
        // clap_complete's bash script completes nothing after a subcommand
        // when the program name has a hyphen (clap-rs/clap#6421: the state
        // it computes, `btrfs__lab__subcmd__df`, is spelled
        // `btrfs__subcmd__lab__subcmd__df` in its case arms). Generated for
        // `btrfs_lab`, the two agree; only the `complete` line names the
        // program, and it is put back to `btrfs-lab`.
        clap_complete::generate(shell, &mut cmd, "btrfs_lab", &mut buf);
        let text = String::from_utf8_lossy(&buf);
        return text
            .lines()
            .map(|l| match l.trim_start().starts_with("complete ") {
                true => l
                    .strip_suffix(" btrfs_lab")
                    .map_or_else(|| l.to_owned(), |head| format!("{head} btrfs-lab")),
                false => l.to_owned(),
            })
            .map(|l| l + "\n")
            .collect();
    }
    clap_complete::generate(shell, &mut cmd, "btrfs-lab", &mut buf);
    let mut text = String::from_utf8_lossy(&buf).into_owned();
    if shell == Shell::Fish {
        cmd.build();
        fish_positional_values(&cmd, &mut Vec::new(), &mut text);
    }
    text
}

/// clap_complete's fish script completes flags' values but not a positional
/// argument's (`completions SHELL` offered file names): one `complete` line
/// per subcommand whose positional arguments have a fixed set of values.
fn fish_positional_values(cmd: &clap::Command, path: &mut Vec<String>, text: &mut String) {
    let values: Vec<String> = cmd
        .get_positionals()
        .flat_map(|a| a.get_possible_values())
        .filter(|v| !v.is_hide_set())
        .map(|v| v.get_name().to_owned())
        .collect();
    if let Some((first, nested)) = path.split_first()
        && !values.is_empty()
    {
        // The same conditions clap_complete writes for a nested
        // subcommand's flags, and none once a value is on the line.
        let mut condition = format!("__fish_btrfs_lab_using_subcommand {first}");
        for n in nested {
            condition.push_str(&format!("; and __fish_seen_subcommand_from {n}"));
        }
        text.push_str(&format!(
            "complete -c btrfs-lab -n \"{condition}; and not __fish_seen_subcommand_from {v}\" -f -a \"{v}\"\n",
            v = values.join(" ")
        ));
        // No file names when every positional argument has fixed values.
        if cmd
            .get_positionals()
            .all(|a| !a.get_possible_values().is_empty())
        {
            text.push_str(&format!("complete -c btrfs-lab -n \"{condition}\" -f\n"));
        }
    }
    for sub in cmd.get_subcommands().filter(|s| s.get_name() != "help") {
        path.push(sub.get_name().to_owned());
        fish_positional_values(sub, path, text);
        path.pop();
    }
}

pub fn run(args: CompletionsArgs, out: &Output) -> Result<u8> {
    if out.json {
        return Err(
            Error::usage("completions prints a shell script; --json does not apply")
                .with_hint("run it without --json: btrfs-lab completions bash > btrfs-lab.bash"),
        );
    }
    out.text(&script(args.shell));
    Ok(exit::OK)
}

use super::page::row;
use btrfs_lab::model::exit as status;

/// What the manual pages of this command add to clap's help: real command
/// lines and the pages to read next (read by `man`).
pub const PAGES: &[super::page::Declared] = &[super::page::Declared {
    words: &["completions"],
    exits: &[
        row(status::OK, "the script was printed."),
        row(
            status::USAGE,
            "bad command line (an unknown shell, --json).",
        ),
    ],
    examples: &[
        (
            "Bash completion for every user.",
            "btrfs-lab completions bash",
        ),
        ("Zsh completion.", "btrfs-lab completions zsh"),
    ],
    see_also: &["man(1)"],
    ..super::page::Declared::NONE
}];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_shell_script_names_every_subcommand() {
        let names: Vec<String> = super::super::command()
            .get_subcommands()
            .map(|s| s.get_name().to_owned())
            .collect();
        assert!(names.iter().any(|n| n == "probe-dio"), "{names:?}");
        for shell in [Shell::Bash, Shell::Zsh, Shell::Fish] {
            let s = script(shell);
            for name in &names {
                assert!(s.contains(name.as_str()), "{shell}: no {name}");
            }
            // Nested ones too.
            for nested in ["up", "down", "list", "add"] {
                assert!(s.contains(nested), "{shell}: no {nested}");
            }
        }
    }
}
